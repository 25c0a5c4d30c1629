// Package faultagent injects faults into the in-guest agent's channel, for
// the fault suite (internal/faultsuite): an agent that replies garbage,
// frames longer than agent.MaxFrame, negative sizes, stale ids, late
// answers, and an endless log on the console and the kernel log.
//
// Only the agent built with the themisfault tag uses it
// (cmd/themis-agent/fault_on.go wraps its channel with Wrap); the
// production agent's channel is its own (fault_off.go), and it does not
// import this package (TestProductionAgentHasNoFaults).
//
// A fault is armed from the host with a Stat of a path whose base name is
// Prefix followed by the mode (ArmPath): the Stat is answered as usual
// (ENOENT) except as the mode says. Garbage, Oversized, Stale, StaleFew and
// Delay act on that Stat's own response; NegSize and Log stay armed for the
// rest of the channel's life. Nothing else changes what the server sends:
// unarmed, a Channel passes every byte through as it is.
//
// A Channel sits between inguest.Server.Serve and the channel device: it
// parses the request frames it reads to see an arming Stat, and rewrites
// the response frames written for it. Serve reads and writes from one
// goroutine; so must any other user of a Channel. The Log mode's writer
// runs in a goroutine of its own until Close.
package faultagent
