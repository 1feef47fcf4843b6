// What a Messages tally says about its stream, as one comparable value: the tests that feed the
// same stream in different ways compare these.
import type { MessagesUsageTally } from '../../src/lanes/messages/usage-tally.js';

export function messagesTallyState(tally: MessagesUsageTally): unknown {
  return {
    usage: tally.usage(),
    state: { ...tally.state },
    outcome: tally.outcome(),
    receipt: tally.hasUsageReceipt,
    stopReason: tally.stopReason,
    id: tally.vendorMessageId,
    model: tally.vendorModel,
    error: tally.errorEvent,
    malformed: tally.malformedEvents,
  };
}
