package qemu

import "path/filepath"

// StatePath is the machine's state image (stateImage), for tests that
// damage it.
func (m *Machine) StatePath() string { return filepath.Join(m.dir, stateImage) }
