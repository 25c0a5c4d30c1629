// Package bugs reads the corpus of real filesystem bugs in this
// directory (README.md): one case per subdirectory, a case.toml manifest
// and the bug.patch that puts the bug back into the guest kernel's source.
// `themisctl bench bugs` runs the same default check on every case and
// on the stock image (docs/bugs.md); the keys of what they find
// (FindingKey, CellKey) tell a case's detection from the stock baseline.
package bugs
