package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The util-linux and coreutils tools a run uses, by absolute path (they
// run inside the private root, where only /usr is).
const (
	prlimitBin = "/usr/bin/prlimit"
	unshareBin = "/usr/bin/unshare"
	setprivBin = "/usr/bin/setpriv"
	chrootBin  = "/usr/sbin/chroot"
)

// setupScript builds the private root in the new mount namespace and
// execs the tool there (see the package doc). $1 the root dir, $2 the
// image, $3 the tool on the host, $4 the tool inside, $5 "rw" when the
// tool may write the image (else it is read-only); the rest the command
// to exec inside the root. It writes "ok" on fd 3 once all is mounted, so a
// failure before is told from the tool's own exit.
const setupScript = `set -eu
root=$1 image=$2 bin=$3 inbin=$4 imagemode=$5
shift 5
robind() { mount --bind "$1" "$2"; mount -o remount,bind,ro,nosuid,nodev "$2"; }
mount -t tmpfs -o size=1m,mode=0755,nosuid,nodev themis-sandbox "$root"
cd "$root"
mkdir usr etc tmp dev tool
for d in bin sbin lib lib32 lib64 libx32; do
	if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$d"
	elif [ -d "/$d" ]; then mkdir "$d"; robind "/$d" "$d"; fi
done
robind /usr usr
for n in null zero urandom; do touch "dev/$n"; mount --bind "/dev/$n" "dev/$n"; done
mkdir -p proc/self
: > etc/mtab
: > proc/self/mounts
touch image
if [ "$imagemode" = rw ]; then mount --bind "$image" image; mount -o remount,bind,nosuid,nodev image
else robind "$image" image; fi
if [ "$bin" != "$inbin" ]; then touch ".$inbin"; robind "$bin" ".$inbin"; fi
mount -t tmpfs -o size=16m,mode=1777,nosuid,nodev themis-tmp tmp
mount -o remount,ro "$root"
printf ok >&3
exec 3>&-
exec ` + chrootBin + ` "$root" "$@"
`

// isolatedArgv is the command line of an isolated run: unshare, the setup
// script, then inside the root prlimit, setpriv (no capabilities) and the
// tool on /image.
func isolatedArgv(root, bin string, args []string, image string, writable bool, rl []string) []string {
	inbin := bin
	if !strings.HasPrefix(bin, "/usr/") {
		inbin = "/tool/" + filepath.Base(bin)
	}
	argv := []string{unshareBin, "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child",
		"--", "/bin/sh", "-c", setupScript, "themis-sandbox", root, image, bin, inbin, map[bool]string{false: "ro", true: "rw"}[writable], prlimitBin}
	argv = append(argv, rl...)
	argv = append(argv, "--", setprivBin, "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all",
		"--ambient-caps=-all", "--", inbin)
	return append(append(argv, args...), "/image")
}

// rlimit is one resource limit a run sets, soft = hard.
type rlimit struct {
	opt   string // prlimit's option
	res   int
	value uint64
}

// rlimitsOf is lim's limits, each never above the hard limit this process
// already has (raising it needs a capability the tool must not rely on).
func rlimitsOf(lim Limits) ([]rlimit, error) {
	cpu := uint64((lim.CPU + time.Second - 1) / time.Second)
	fsize := uint64(lim.FileSize)
	if lim.FileSize == NoFileSizeLimit {
		fsize = unix.RLIM_INFINITY
	}
	out := []rlimit{
		{"--cpu", unix.RLIMIT_CPU, cpu},
		{"--as", unix.RLIMIT_AS, uint64(lim.Memory)},
		{"--fsize", unix.RLIMIT_FSIZE, fsize},
		{"--nofile", unix.RLIMIT_NOFILE, uint64(lim.Files)},
	}
	for i, r := range out {
		var cur unix.Rlimit
		if err := unix.Getrlimit(r.res, &cur); err != nil {
			return nil, fmt.Errorf("getrlimit %s: %w", r.opt, err)
		}
		out[i].value = min(r.value, cur.Max)
	}
	return out, nil
}

// rlimitArgs is prlimit's options for lim.
func rlimitArgs(lim Limits) ([]string, error) {
	rs, err := rlimitsOf(lim)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		v := strconv.FormatUint(r.value, 10)
		if r.value == unix.RLIM_INFINITY {
			v = "unlimited"
		}
		out = append(out, r.opt+"="+v)
	}
	return out, nil
}

// hasPrlimit says whether util-linux prlimit is here (a variable: tests
// take it away).
var hasPrlimit = func() bool {
	_, err := os.Stat(prlimitBin)
	return err == nil
}

// setRlimits puts lim's limits on process pid.
func setRlimits(pid int, lim Limits) error {
	rs, err := rlimitsOf(lim)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := unix.Prlimit(pid, r.res, &unix.Rlimit{Cur: r.value, Max: r.value}, nil); err != nil {
			return fmt.Errorf("prlimit %s on %d: %w", r.opt, pid, err)
		}
	}
	return nil
}

// isolation is the one-time probe's answer.
type isolation struct {
	ok  bool
	why string // when !ok
}

var probe = sync.OnceValue(func() isolation {
	if os.Geteuid() != 0 {
		return isolation{why: "not root (mount namespaces need CAP_SYS_ADMIN)"}
	}
	for _, b := range []string{unshareBin, setprivBin, chrootBin, prlimitBin} {
		if _, err := os.Stat(b); err != nil {
			return isolation{why: fmt.Sprintf("%s missing (Debian util-linux/coreutils): %v", b, err)}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, unshareBin, "--mount", "--pid", "--net", "--ipc", "--uts",
		"--fork", "--kill-child", "--", "/bin/true").CombinedOutput()
	if err != nil {
		return isolation{why: fmt.Sprintf("unshare: %v: %s", err, strings.TrimSpace(string(out)))}
	}
	return isolation{ok: true}
})

// Isolated says whether runs get the namespaces and the private root here.
func Isolated() bool { return probe().ok }

// Why says why runs are not isolated here ("" when they are).
func Why() string { return probe().why }

// signalName is sig's name ("SIGSEGV").
func signalName(sig unix.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(sig))
}
