// The WebSocket transport's figures (server/ws-hub.ts): sockets open now, sockets opened, and turns
// by how they ended. Counted in plain fields, read when Prometheus scrapes; labels from a fixed list.
import { Counter, Gauge, type Registry } from 'prom-client';
import { CLIENT_CLOSED_STATUS } from './request-metrics.js';

/** How a turn ended, from the status its request got (499: the client closed the socket mid-turn). */
const OUTCOMES = ['streamed', 'refused', 'failed', 'client_closed'] as const;
type Outcome = (typeof OUTCOMES)[number];

function outcomeOf(status: number): Outcome {
  if (status === CLIENT_CLOSED_STATUS) return 'client_closed';
  if (status >= 500) return 'failed';
  if (status >= 400) return 'refused';
  return 'streamed';
}

export class WebSocketMetrics {
  private openNow = 0;
  private opened = 0;
  private readonly turns: Record<Outcome, number> = { streamed: 0, refused: 0, failed: 0, client_closed: 0 };

  socketOpened(): void {
    this.openNow++;
    this.opened++;
  }

  socketClosed(): void {
    this.openNow--;
  }

  turnEnded(status: number): void {
    this.turns[outcomeOf(status)]++;
  }

  register(registry: Registry): void {
    const figures = this;
    new Gauge({
      name: 'inkgate_websockets_open',
      help: 'WebSockets open on this instance now (Responses over one WebSocket).',
      registers: [registry],
      collect() {
        this.set(figures.openNow);
      },
    });
    new Counter({
      name: 'inkgate_websockets_opened_total',
      help: 'WebSockets opened on this instance.',
      registers: [registry],
      collect() {
        this.reset();
        this.inc(figures.opened);
      },
    });
    new Counter({
      name: 'inkgate_websocket_turns_total',
      help: 'Turns (response.create events) on WebSockets, by outcome (streamed, refused: 4xx, failed: 5xx, client_closed: the socket closed mid-turn).',
      labelNames: ['outcome'],
      registers: [registry],
      collect() {
        this.reset();
        for (const o of OUTCOMES) this.inc({ outcome: o }, figures.turns[o]);
      },
    });
  }
}
