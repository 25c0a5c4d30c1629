// Package patchtest holds the real kernel patches the tests build into a
// guest image (guest build --patch): small changes to a filesystem the
// guest loads as a module, each with the finding it causes, and the
// build of their image, shared by the tests of every layer that runs one.
package patchtest
