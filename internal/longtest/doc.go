// Package longtest gates the tests that are too long for the README's
// test command (which must stay under 15 minutes on 2 cores): the whole
// fault suite, a patched module built and explored. They skip, naming
// the gate, unless $THEMIS_LONG_TESTS is 1; .ci/run runs them as a step
// of their own on every landing.
package longtest
