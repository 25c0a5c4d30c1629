// Package vmm defines the Machine interface that every backend implements
// (vmm/qemu, vmm/kvm) and the types shared between backends and the
// session layer. Both backends keep their checkpoints through one path,
// vmm/checkpoint, and run one conformance suite, vmm/vmmtest.
//
// A Machine is one running guest: an unmodified Linux kernel whose /init is
// the themis agent, with one overlay-backed disk per lane. The machine owns
// its child processes, sockets and memory; Close releases all of them and is
// idempotent.
//
// Checkpoints form a path: Checkpoint pushes a new checkpoint (and an overlay
// layer on every disk) on top of the current one; Restore(id) returns the
// whole machine — memory, vCPU, devices and every disk — to any checkpoint on
// the current path, dropping the checkpoints above it. A depth-first search
// therefore checkpoints before an operation and restores afterwards.
// Checkpoints are taken only at quiescent points: the agent has replied and
// issued no I/O since. A Checkpoint, Restore or Delete that fails half-way
// breaks the machine: that call and every later one but Close return an
// error wrapping ErrBroken (which wraps ErrGuestDied).
//
// Concurrency: a Machine's methods are safe for concurrent use but are
// serialized internally; callers get no parallelism from one machine.
//
// This package must not import grpc or any backend.
package vmm
