// Package opspec parses filesystem operations written by people
// ("write d-00/f-00 0 4096 0x55 append") or as protojson
// ('{"mkdir":{"path":"d","mode":493}}') into themis.v1 Op messages, and
// formats them back. The short form is what themisctl apply, traces and
// findings print; Format(Parse(s)) is canonical.
//
// ParseWalk and FormatWalk do the same for a profile's read-side commands,
// "ls [DIR]" and "find [DIR]", which are agent Walks, not Ops: they change
// nothing, so Apply and exploration never run them.
//
// It checks syntax only; the session validates values (paths, sizes).
package opspec
