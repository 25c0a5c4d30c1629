// Package api is the vocabulary of the themis.v1 API that is not in its
// proto messages: the limits a client may ask up to, and the strings the
// daemon puts in them (finding kinds, crash verdicts, corruption classes,
// the profile's default ops). The daemon's runs define their constants
// as these, so a client (themisctl, remote CI) reads them here without
// importing the daemon's side. Pure: no I/O, no dependencies.
package api
