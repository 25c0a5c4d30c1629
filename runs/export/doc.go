// Package export builds a finding's standalone reproducer on the daemon
// (the Export RPC, `themisctl findings export`): for an errno, state or
// kernel finding, repro.c, repro.sh and README (package repro) with the
// patches of the image it was found on, copied from the daemon's image
// cache, and a replay on the lanes' stock image; for a crash finding, the
// crash state's disk image (the setup and trace replayed in a fresh
// session, crashcheck with Only) and check.sh, README and trace.txt. With
// Options.Format fstests it writes the finding as an fstests test instead
// (repro.FSTestsFiles, from the finding as stored: no guest runs), the
// golden output the reference lane's errno or state value, as the
// finding's detail words it, or the model's. The files and the image go
// to the caller's sinks; the caller writes them.
package export
