package inguest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// Overlay lanes: kernel overlayfs at Root/<lane> over two layers mounted at
// Layers/<lane>/lower (read-only) and Layers/<lane>/upper. The upper
// filesystem holds the upper directory and overlayfs's work directory side
// by side: they must be on one filesystem and neither inside the other.
const (
	overlayFstype      = "overlay"
	defaultLayerFstype = "ext2"
	upperDirName       = "upper" // the upper directory, on the upper filesystem
	workDirName        = "work"  // overlayfs's work directory, beside it
)

// overlayOwnOptions are the overlayfs options the agent sets itself.
var overlayOwnOptions = []string{"lowerdir", "upperdir", "workdir"}

// layersDir is the directory holding overlay lanes' layer mounts.
func (s *Server) layersDir() string {
	if s.Layers != "" {
		return s.Layers
	}
	return filepath.Join(filepath.Dir(s.Root), "layers")
}

// layerPath is where one layer ("lower" or "upper") of an overlay lane is
// mounted.
func (s *Server) layerPath(lane, layer string) string {
	return filepath.Join(s.layersDir(), lane, layer)
}

// upperDir is an overlay lane's upper directory, as seen from below.
func (s *Server) upperDir(lane string) string {
	return filepath.Join(s.layerPath(lane, "upper"), upperDirName)
}

// checkMountOptions refuses what no lane may be mounted with: metacopy=on
// (for overlayfs: the upper layer would hold metadata-only copies, and the
// layer seen from below would record empty files). For an overlay lane it
// also refuses the options the agent sets itself, and the overlay fields on
// any other lane.
func checkMountOptions(m *agentv1.Mount) error {
	overlay := m.GetFstype() == overlayFstype
	for _, o := range strings.Split(m.GetOptions(), ",") {
		key, val, _ := strings.Cut(strings.TrimSpace(o), "=")
		if key == "metacopy" && val != "off" {
			return errorf(unix.EINVAL, "mount option %q refused: with metacopy an overlay upper layer keeps a copied-up file's metadata while its data stays in the lower layer, so the upper layer seen from below would record empty files (mount with metacopy=off)", o)
		}
		if overlay {
			for _, own := range overlayOwnOptions {
				if key == own {
					return errorf(unix.EINVAL, "mount option %q refused: the agent sets %s for overlay lanes", o, own)
				}
			}
		}
	}
	switch {
	case overlay && m.GetLowerDevice() == "":
		return errorf(unix.EINVAL, "overlay lane %q: no lower_device", m.GetLane())
	case !overlay && (m.GetLowerDevice() != "" || m.GetLayerFstype() != ""):
		return errorf(unix.EINVAL, "lane %q: lower_device and layer_fstype are for overlay lanes (fstype %q)", m.GetLane(), m.GetFstype())
	}
	return nil
}

// overlayData returns the overlayfs mount data for the layers and the
// caller's options (flags already taken out): lowerdir, upperdir, workdir,
// the options, and metacopy=off unless they say it already. The layer
// paths hold the lane's name, which may contain ':' (a lane's default name
// is its spec, "overlay:seed=1"): overlayfs splits lowerdir at ':', so ':'
// and '\' are escaped with '\', which it reads back in every *dir option.
func overlayData(lower, upper, work, opts string) string {
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace
	parts := []string{"lowerdir=" + esc(lower), "upperdir=" + esc(upper), "workdir=" + esc(work)}
	metacopy := false
	for _, o := range strings.Split(opts, ",") {
		if o == "" {
			continue
		}
		metacopy = metacopy || strings.HasPrefix(o, "metacopy=")
		parts = append(parts, o)
	}
	if !metacopy {
		parts = append(parts, "metacopy=off")
	}
	return strings.Join(parts, ",")
}

// mountOverlay mounts an overlay lane at target: the lower layer read-only,
// the upper layer, the upper and work directories on it (created on first
// use), then overlayfs. On failure nothing stays mounted.
func (s *Server) mountOverlay(lane, target string, cfg *agentv1.Mount) (err error) {
	layerFS := cfg.GetLayerFstype()
	if layerFS == "" {
		layerFS = defaultLayerFstype
	}
	lowerDev, err := s.device(cfg.GetLowerDevice())
	if err != nil {
		return fmt.Errorf("lower layer: %w", err)
	}
	upperDev, err := s.device(cfg.GetDevice())
	if err != nil {
		return fmt.Errorf("upper layer: %w", err)
	}
	lower, upperFS := s.layerPath(lane, "lower"), s.layerPath(lane, "upper")
	for _, d := range []string{lower, upperFS} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	if err := unix.Mount(lowerDev, lower, layerFS, unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mount lower layer %s on %s (%s, read-only): %w", lowerDev, lower, layerFS, err)
	}
	var mounted []string // to undo on failure, last first
	mounted = append(mounted, lower)
	defer func() {
		if err == nil {
			return
		}
		for i := len(mounted) - 1; i >= 0; i-- {
			if uerr := unix.Unmount(mounted[i], 0); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undo: unmount %s: %w", mounted[i], uerr))
			}
		}
	}()
	if err := unix.Mount(upperDev, upperFS, layerFS, 0, ""); err != nil {
		return fmt.Errorf("mount upper layer %s on %s (%s): %w", upperDev, upperFS, layerFS, err)
	}
	mounted = append(mounted, upperFS)
	upper, work := filepath.Join(upperFS, upperDirName), filepath.Join(upperFS, workDirName)
	if err := makeUpperDirs(upperFS, upper, work); err != nil {
		return err
	}
	flags, opts := mountOptions(cfg.GetOptions())
	if cfg.GetReadOnly() {
		flags |= unix.MS_RDONLY
	}
	data := overlayData(lower, upper, work, opts)
	if err := unix.Mount(overlayFstype, target, overlayFstype, flags, data); err != nil {
		return fmt.Errorf("mount overlay on %s (%q): %w", target, data, err)
	}
	return nil
}

// makeUpperDirs creates the upper and work directories on a freshly made
// upper filesystem. The upper directory is the merged view's root, so it
// gets the upper filesystem root's mode and owner: an overlay lane's root
// looks like a fresh ext2 root.
func makeUpperDirs(upperFS, upper, work string) error {
	var root unix.Stat_t
	if err := unix.Stat(upperFS, &root); err != nil {
		return fmt.Errorf("stat upper layer root: %w", err)
	}
	err := unix.Mkdir(upper, root.Mode&0o7777)
	switch {
	case err == nil:
		if err := unix.Chmod(upper, root.Mode&0o7777); err != nil { // past the umask
			return fmt.Errorf("chmod %s: %w", upper, err)
		}
		if err := unix.Chown(upper, int(root.Uid), int(root.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", upper, err)
		}
	case !errors.Is(err, unix.EEXIST):
		return fmt.Errorf("mkdir %s: %w", upper, err)
	}
	if err := unix.Mkdir(work, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mkdir %s: %w", work, err)
	}
	return nil
}

// umountLayers unmounts an overlay lane's layers, once overlayfs is
// unmounted: the upper layer, then the lower.
func (s *Server) umountLayers(lane string) error {
	var errs []error
	for _, layer := range []string{"upper", "lower"} {
		p := s.layerPath(lane, layer)
		if err := unix.Unmount(p, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s layer %s: %w", layer, p, err))
		}
	}
	return errors.Join(errs...)
}

// overlayLane checks that lane is a mounted overlay lane, for the walks of
// its layers.
func (s *Server) overlayLane(lane string) error {
	if err := checkLane(lane); err != nil {
		return err
	}
	s.mu.Lock()
	st := s.lanes[lane]
	s.mu.Unlock()
	switch {
	case st == nil || st.cfg.GetFstype() != overlayFstype:
		return errorf(unix.EINVAL, "lane %q is not an overlay lane: there is no layer below it", lane)
	case !st.mounted:
		return errorf(unix.ENOENT, "lane %q is not mounted", lane)
	}
	return nil
}

// fingerprintBelow implements Fingerprint with below: the walk of an
// overlay lane's upper directory with markers classified.
func (s *Server) fingerprintBelow(o *agentv1.Fingerprint) (*agentv1.FingerprintResult, error) {
	lane := o.GetLane()
	if err := s.overlayLane(lane); err != nil {
		return nil, err
	}
	base := s.upperDir(lane)
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open upper directory %s: %w", base, err)
	}
	defer s.closeFd(fd, "upper directory of "+lane)
	return fingerprintUpper(fd, base, o.GetTimeMode(), o.GetLeaves())
}

// fingerprintLower implements Fingerprint with lower: a plain walk of an
// overlay lane's lower layer, mounted read-only (so the walk changes no
// atime there).
func (s *Server) fingerprintLower(o *agentv1.Fingerprint) (*agentv1.FingerprintResult, error) {
	lane := o.GetLane()
	if err := s.overlayLane(lane); err != nil {
		return nil, err
	}
	base := s.layerPath(lane, "lower")
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open lower layer %s: %w", base, err)
	}
	defer s.closeFd(fd, "lower layer of "+lane)
	return fingerprint(fd, o.GetTimeMode(), o.GetLeaves())
}
