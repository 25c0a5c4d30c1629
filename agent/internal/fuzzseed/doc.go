// Package fuzzseed holds the seed inputs the agent's two fuzz targets
// share: agent's FuzzReadFrame and inguest's FuzzServe both read a byte
// stream of frames, and each package's TestSeedCorpus writes these seeds to
// its testdata/fuzz with -update. Only tests import it.
//
// It builds frames itself (a 4-byte big-endian length, then the serialized
// message) rather than with agent.WriteFrame: agent's own tests import it,
// so it must not import agent.
package fuzzseed
