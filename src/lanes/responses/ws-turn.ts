// A Responses turn on a WebSocket: the `response.create` event is the POST body plus the event's
// envelope. The envelope is checked and taken off here, and the body then goes through the HTTP
// lane's own rules (request.ts), so a turn is refused with exactly the codes a POST would get.
import { ApiError } from '../../errors.js';

/** The one client event served; `response.steer` and the rest need state the service does not keep. */
const CREATE = 'response.create';

/**
 * The body of the POST this `response.create` event stands for, streamed: `type` taken off,
 * `stream` true. Throws the error event's error for anything else.
 */
export function turnBody(event: Record<string, unknown>): Record<string, unknown> {
  const type = event.type;
  if (type !== CREATE) {
    const got = typeof type === 'string' ? `"${type.slice(0, 64)}"` : 'no type';
    throw new ApiError('invalid_enum', {
      param: 'type',
      message: `Each message must be a ${CREATE} event (got ${got}); one response runs at a time per socket, and no conversation state is kept.`,
    });
  }
  if (event.stream_id !== undefined && event.stream_id !== null)
    throw new ApiError('unsupported_parameter', {
      param: 'stream_id',
      message: '`stream_id` is not supported: a socket runs one response at a time, in order.',
    });
  // Over a WebSocket every response streams: `stream` is implied, and false cannot be met.
  if (event.stream === false)
    throw new ApiError('unsupported_parameter', { param: 'stream', message: 'Responses over a WebSocket always stream: leave `stream` out.' });
  const body: Record<string, unknown> = {};
  for (const k in event) if (k !== 'type' && k !== 'stream_id') body[k] = event[k];
  body.stream = true;
  return body;
}
