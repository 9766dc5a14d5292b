package commands

import "slices"

// Normalize is the recipient's normal form on channel (stand-in until each channel declares its
// own; replaced by the channels' Normalize).
func (c *Channels) Normalize(channel, recipient string) string { return recipient }

func sortedStrings(xs []string) []string { slices.Sort(xs); return xs }
