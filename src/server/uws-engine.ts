// The uWS engine: one App whose every request becomes a UwsContext, handed to the server at once
// (uWS lends the request only for that synchronous call).
import type { EngineListener, EngineOptions, OnRequest } from './listener.js';
import type { UsListenSocket, UwsModule } from './uws-loader.js';
import { UwsContext } from './uws-context.js';
import { DEFAULT_WS_MESSAGE_BYTES } from './ws-node.js';
import { uwsWebSockets } from './ws-uws.js';

export function listenUws(uws: UwsModule, options: EngineOptions, onRequest: OnRequest): Promise<EngineListener> {
  const app = uws.App();
  app.ws('/*', uwsWebSockets(uws, options.maxWebSocketMessageBytes ?? DEFAULT_WS_MESSAGE_BYTES, onRequest));
  app.any('/*', (res, req) => onRequest(new UwsContext(res, req)));
  return new Promise((resolveL, reject) => {
    app.listen(options.host, options.port, (sock: UsListenSocket | false) => {
      if (!sock) {
        reject(new Error(`cannot listen on ${options.host}:${options.port}`));
        return;
      }
      let listening = true;
      resolveL({
        port: uws.us_socket_local_port(sock),
        stopAccepting: () => {
          if (listening) uws.us_listen_socket_close(sock);
          listening = false;
        },
        // Builds that have it close every socket; older ones leave idle keep-alive sockets to their 10 s timeout.
        closeAll: () => (app as { close?: () => void }).close?.(),
      });
    });
  });
}
