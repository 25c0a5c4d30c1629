// Package diskdiff compares two lane disks of running sessions — a lane at
// two points of one session, two lanes of one session, or lanes of two
// sessions — byte by byte, labelled by filesystem structure
// (fsimage.Diff), over the views session.Manager.Views resolves.
package diskdiff
