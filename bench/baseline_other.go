//go:build !linux

package bench

import (
	"errors"
	"fmt"
	"os"
)

func defaultWorkDir() string { return os.TempDir() }

func checkHost() error {
	return fmt.Errorf("%w: loop mounts are Linux only: %w", ErrUnavailable, errors.ErrUnsupported)
}

func newMounter(string) (mounter, error) { return nil, checkHost() }
