// HTTP side of video generations: submit, poll, download redirect; and the media host that serves
// signed links for non-/v1 paths (plug `mediaHostHandler(deps)` into the server's `other` hook).
import { ApiError } from '../../errors.js';
import type { Services } from '../../services.js';
import { handleMediaRequest, writeMediaResponse, type Headers as MediaHeaders, type MediaSink } from '../../media/media-host.js';
import { MEDIA_PATH_PREFIX } from '../../media/signed-link.js';
import type { HttpContext } from '../../server/http-context.js';
import type { Route } from '../../server/router.js';
import type { VideoDeps } from './deps.js';
import { presentGeneration } from './present.js';
import { generationRoutes } from '../generation-routes.js';
import { submitVideo } from './submit.js';

export { mediaOrigin } from '../generation-routes.js';

export function videoRoutes(services: Services, deps: VideoDeps): Route[] {
  return generationRoutes(services, deps, {
    path: '/v1/video/generations',
    kind: 'video',
    idPattern: /^vgen_[A-Za-z0-9]{1,64}$/,
    noun: 'video generation',
    bodyBytes: services.config.limits.videoBodyBytes,
    submit: submitVideo,
    present: presentGeneration,
  });
}

/**
 * The media host for the server's `other` hook (non-/v1 paths): GET (or HEAD) /media/<key>?exp=&sig= served
 * from the media store after the signature check. Returns false for any other path (-> 404).
 */
export function mediaHostHandler(deps: Pick<VideoDeps, 'media' | 'mediaSecret' | 'clock'>): (ctx: HttpContext) => boolean {
  return (ctx) => {
    if (!ctx.path.startsWith(MEDIA_PATH_PREFIX) || (ctx.method !== 'GET' && ctx.method !== 'HEAD')) return false;
    // The context already sends Cache-Control: no-store; uWS frames the body itself (chunked, or
    // its own Content-Length for HEAD), so a Content-Length of our own would contradict it.
    const ours = (headers: MediaHeaders) => headers.filter(([k]) => k !== 'content-length' && k !== 'cache-control');
    const sink: MediaSink = {
      headOnly: ctx.method === 'HEAD',
      head: (status, headers) => ctx.startStream(status, ours(headers)),
      endHead: (status, headers, sizeBytes) => ctx.sendHead(status, ours(headers), sizeBytes),
      write: (chunk) => ctx.write(chunk),
      drained: () => ctx.waitWritable(),
      end: (body) => ctx.end(body),
      get aborted() {
        return ctx.aborted;
      },
    };
    handleMediaRequest({ path: ctx.path, query: ctx.query, requestId: ctx.requestId }, deps.media, deps.mediaSecret, Math.floor(deps.clock() / 1000))
      .then((r) => writeMediaResponse(r, sink))
      .catch(() => {
        if (!ctx.responded) ctx.sendError(new ApiError('not_found', { message: 'There is no media at this link.' }));
        else ctx.end();
      });
    return true;
  };
}
