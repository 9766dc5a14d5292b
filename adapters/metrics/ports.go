package metrics

import "github.com/deliveryledger/ledger/commands"

// The use cases' ports that Metrics implements: a change of either side fails the build here
// rather than at the wiring.
var _ commands.AttemptMetrics = (*Metrics)(nil)
