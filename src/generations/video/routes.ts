// HTTP side of video generations: submit, poll, download redirect (the shared ../routes.ts).
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { GenerationDeps } from '../deps.js';
import { generationRoutes } from '../routes.js';
import { presentVideoGeneration } from './present.js';
import { submitVideo } from './submit.js';

export function videoRoutes(services: Services, deps: GenerationDeps): Route[] {
  return generationRoutes(services, deps, {
    path: '/v1/video/generations',
    kind: 'video',
    idPattern: /^vgen_[A-Za-z0-9]{1,64}$/,
    noun: 'video generation',
    bodyBytes: services.config.limits.videoBodyBytes,
    submit: submitVideo,
    present: presentVideoGeneration,
  });
}
