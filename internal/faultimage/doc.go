// Package faultimage builds, for a real-guest test, a guest image whose
// agent is the themisfault one with a CrashOn fixed at link time
// (internal/faultagent): every guest booted from it crashes its kernel,
// or hangs a task, on the requests the CrashOn names. The image is of the
// kernel the default image was made of, in a cache of the test's own.
package faultimage
