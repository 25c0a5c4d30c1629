package session

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/themisfs/themis/errkind"
	"github.com/themisfs/themis/internal/budget"
	"github.com/themisfs/themis/vmm"
	"go.uber.org/zap"
)

// The kinds of host bytes a session's budget counts.
const (
	kindOverlay       = "overlay"        // the sectors its lanes' overlays hold
	kindKept          = "kept content"   // file content kept for RestoreFile
	kindCheckpointRAM = "checkpoint RAM" // the machine's checkpoints (vmm.CheckpointMemory)
)

// Budget defaults.
const (
	// DefaultSessionBudget is Config.SessionBudget when unset.
	DefaultSessionBudget = 2 << 30
	// minDaemonBudget is the least default daemon budget.
	minDaemonBudget = 256 << 20
)

// The config keys of the budgets' limits, named in their errors.
const (
	SessionBudgetKey = "limits.session_budget_mib"
	DaemonBudgetKey  = "limits.daemon_budget_mib"
)

// DefaultDaemonBudget is Config.DaemonBudget when unset: half the host's
// memory, at least 256 MiB. (Guest RAM, bounded by MaxMemoryMiB, is not
// taken off: that is a cap, not what runs; on a small host, say an
// emulated one of 2 GiB, the rest would leave no room for two guests'
// checkpoints.)
func DefaultDaemonBudget() (int64, error) {
	total, err := hostMemory()
	if err != nil {
		return 0, err
	}
	return max(total/2, minDaemonBudget), nil
}

// hostMemory is MemTotal of /proc/meminfo, in bytes.
func hostMemory() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("session: host memory: %w", err)
	}
	return parseMemTotal(b)
}

// parseMemTotal reads the "MemTotal: N kB" line of a meminfo.
func parseMemTotal(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 3 && string(f[0]) == "MemTotal:" && string(f[2]) == "kB" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil || kb <= 0 || kb > 1<<43 {
				return 0, fmt.Errorf("session: meminfo: MemTotal %q", f[1])
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("session: meminfo: no MemTotal line")
}

// newBudgets checks and defaults cfg's budgets and returns the daemon's.
func newBudgets(cfg *Config) (*budget.Budget, error) {
	switch {
	case cfg.SessionBudget < 0:
		return nil, fmt.Errorf("session: Config.SessionBudget %d: want >= 0 (0: %d MiB)", cfg.SessionBudget, DefaultSessionBudget>>20)
	case cfg.DaemonBudget < 0:
		return nil, fmt.Errorf("session: Config.DaemonBudget %d: want >= 0 (0: half the host's memory)", cfg.DaemonBudget)
	}
	if cfg.DaemonBudget == 0 {
		d, err := DefaultDaemonBudget()
		if err != nil {
			return nil, err
		}
		cfg.DaemonBudget = d
	}
	if cfg.SessionBudget == 0 {
		cfg.SessionBudget = min(DefaultSessionBudget, cfg.DaemonBudget)
	}
	return budget.New("daemon", DaemonBudgetKey, cfg.DaemonBudget, nil)
}

// minFreeToCreate is the daemon budget a new session needs left: what
// mounting its lanes alone may write.
const minFreeToCreate = 1 << 20

// newSessionBudget is session id's budget under the daemon's; a daemon
// with less than minFreeToCreate of its budget left refuses new sessions.
func (m *Manager) newSessionBudget(id string) (*budget.Budget, error) {
	if used := m.budget.Used(); used > m.budget.Limit()-minFreeToCreate {
		return nil, fmt.Errorf("daemon budget exhausted: %s of %s in use, a new session needs %s (%s): %w",
			budget.Size(used), budget.Size(m.budget.Limit()), budget.Size(minFreeToCreate), DaemonBudgetKey, errkind.ErrExhausted)
	}
	return budget.New("session "+id, SessionBudgetKey, m.cfg.SessionBudget, m.budget)
}

// overBudget is the refusal of a write to s's overlays (the guest saw an
// I/O error), once there was one; it stays. s.mu is held.
func (s *session) overBudget() error {
	if s.exhausted == nil && s.budget != nil {
		s.exhausted = s.budget.Refused()
	}
	return s.exhausted
}

// budgetFailed fails s after what saw its overlays refused a write
// (reason: the refusal, naming what ran out): its guest got I/O errors,
// so its filesystems no longer model anything. s.mu is held.
func (m *Manager) budgetFailed(s *session, what string, refusal error) error {
	reason := fmt.Sprintf("%s: %v", what, refusal)
	if err := m.stop(s, StateFailed, reason); err != nil {
		m.log.Warn("stop session over its budget", zap.String("session", s.info.ID), zap.Error(err))
	}
	return fmt.Errorf("session %s failed: %s: %w: %w", s.info.ID, what, errkind.ErrExhausted, refusal)
}

// syncCheckpointRAM sets s's checkpoint RAM usage from its machine; a
// refused growth is an error wrapping errkind.ErrExhausted (the usage stays).
// s.mu is held.
func (s *session) syncCheckpointRAM() error {
	cm, ok := s.mach.(vmm.CheckpointMemory)
	if !ok || s.budget == nil {
		return nil
	}
	if err := s.budget.Set(kindCheckpointRAM, cm.CheckpointBytes()); err != nil {
		return fmt.Errorf("%w: %w", errkind.ErrExhausted, err)
	}
	return nil
}

// shrinkCheckpointRAM is syncCheckpointRAM after a restore or a delete,
// which give memory back: a growth there (a backend's saved states kept
// until the next checkpoint) is logged, and counted at the next
// checkpoint. s.mu is held.
func (m *Manager) shrinkCheckpointRAM(s *session) {
	if err := s.syncCheckpointRAM(); err != nil {
		m.log.Warn("checkpoint memory after a restore", zap.String("session", s.info.ID), zap.Error(err))
	}
}
