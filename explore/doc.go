// Package explore is the model checker's pure core: a bounded depth-first
// search over filesystem states, the Metis operation generator with its
// argument bins, finding detection and delta-debugging minimization.
//
// It drives a [System] (the session implements one over a real guest with
// one or more lanes) and never does I/O, reads the clock or spawns anything
// of its own: time budgets come in as Config.Stop, randomness from
// Config.Seed. Given the same seed and a deterministic System, a run reaches
// the same set of states and findings, over one System or several.
//
// # Search
//
// From the root the Checker takes a checkpoint, fingerprints every lane and
// marks the tuple of lane roots visited. At each state above Config.Depth it
// draws distinct operations with a PCG generator seeded from Config.Seed and
// the state itself (its tuple of roots) — the Metis generator one of every
// enabled kind (in an order drawn from that generator, arguments from the
// bins on paths that fit the state), then more drawn by weight up to
// Config.Branching, so max(Branching, kinds) in all — and for each: restores
// the state's checkpoint (lazily: not before the first child), applies the
// op on every lane, compares the lanes' errnos, takes a fingerprint,
// compares the lanes' roots, and recurses into the child when its root
// tuple was never seen, or only seen deeper (so the set of states reached
// equals a breadth-first search to the same depth). A child is checkpointed
// before its own children run and dropped when the search leaves it.
// Checkpoints are used strictly as a stack: Restore and Drop always name the
// most recent checkpoint still held.
//
// # Workers
//
// NewParallelChecker runs one search over several Systems, one goroutine
// each. Work is split by subtree: a worker that finds the queue empty and
// another worker idle hands it half of the ops not started yet at the
// shallowest state of its path that has some (at a state whose children
// are leaves, only with 4 or more left), as an item (the trace from the
// root and the ops); the taker replays the trace from its own root
// checkpoint and goes on from there. Because what is tried at a state
// depends on the state alone, the states reached do not depend on which
// worker reached a state first or along which trace; the digest hashes the
// set of states, and every finding is reported, in the end, with the least
// trace (shorter first, then by the ops' keys) that reaches its state over
// the edges the search applied (the canonical trace) — so for a
// deterministic System the unique states, digest and findings are the same
// for any number of workers and any timing. A worker whose System dies
// (ErrGuestDied) gets a fresh System from Workers.Replace. When it died
// applying an op (or checking the state the op led to) and its kernel
// left a report (a KernelCrash), the op is known to kill the guest there:
// a "kernel" finding at once, with the report; the op is never applied at
// that state again, what the item visited stays visited, and what the
// worker's path had not started yet goes back to the queue, so the search
// goes on and covers everything but that op's subtree. Any other death
// (without a report: the emulator killed, the agent silent, or a guest
// that dies at every op; or in a restore, a checkpoint, a replay) takes
// back what the item marked visited and puts the item back, and an item
// that kills two Systems is a finding ("guest-died", or "kernel") that
// ends the search. Without Replace every death is a finding that ends the
// search.
//
// # Findings
//
// Lanes that disagree on errno or on state, a failed Config.Checks
// self-reference, a trace that replays from the root to a different state
// (Config.ReplaySample) or a System error wrapping [ErrGuestDied] (a
// [KernelCrash]: kind "kernel" with the kernel's report) are findings:
// results, not errors. Each distinct finding is shrunk after the search
// with [Minimize] (ddmin, replaying candidates from the root checkpoint)
// and reported with its trace, the lanes' errnos, and for a state
// divergence the first differing path and field. A "kernel" finding is
// minimized only with Workers.Replace, each try in a fresh System
// (Workers.Fresh; without it, worker 0's restored to its root checkpoint)
// and a System a try killed replaced before the next: a try reproduces
// it when the guest dies with a report of the same signature (the
// report's kind and where: kreport.Report.Signature), and the minimized
// trace ends at the op that crashed. Guest-died findings are not
// minimized (a death without a report need not be the trace's).
//
// # Ops
//
// Operations are *agentv1.Request values with exactly one operation set: a
// lane operation with its lane field empty (the session fans it out per
// lane), or sync, which is machine-wide and runs once. The kinds are the
// fourteen of MetisOps (the default) and the persistence kinds fsync,
// fdatasync and sync, enabled through Config.Ops. They are not themis.v1 Op
// messages because that Go package carries the gRPC service stubs, which
// this package must not import; themis.v1 Op and the agent request hold the
// same per-op messages.
//
// # Concurrency
//
// A Checker runs one search at a time. Each System is called from one
// goroutine (its worker's; the one that called Run for a single System).
// Config callbacks (Found, Progress, Stop) are called one at a time, under
// the search's lock, from any worker; the Generator is called by one worker
// at a time.
//
// This package must not import vmm, grpc or os/exec (internal/arch checks).
package explore
