package kvm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/themisfs/themis/internal/kvmtest"
	"github.com/themisfs/themis/vmm"
	"github.com/themisfs/themis/vmm/kvm"
	"github.com/themisfs/themis/vmm/vmmtest"
	"go.uber.org/zap/zaptest"
)

// earlyBootEnv asks for TestLinuxEarlyBoot on a host without vmx/svm.
const earlyBootEnv = "THEMIS_KVM_EARLYBOOT"

// TestLinuxEarlyBoot boots the real Debian kernel on this backend far
// enough to check, from the kernel's own words on our serial console, that
// the boot protocol was followed: the kernel found our command line and
// our e820 map. On PVM hosts (no vmx/svm) the kernel runs its high-address
// code by instruction emulation and dies later (platform.md); this test
// stops once the e820 map is printed. Under PVM that takes over two
// minutes of the host kernel's emulation (130 s measured, all of it
// system time), so there it runs only where THEMIS_KVM_EARLYBOOT=1 asks
// (CI's step of its own, .ci/run); with vmx/svm it always runs.
func TestLinuxEarlyBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a kernel")
	}
	kvmtest.Need(t)
	if hw, _ := kvm.HardwareVirtualization(); !hw && os.Getenv(earlyBootEnv) != "1" {
		t.Skipf("no vmx/svm: the kernel's early boot is emulated (over 2 minutes); %s=1 runs it (a CI step of its own)", earlyBootEnv)
	}
	env := vmmtest.SetupImage(t)
	const mib = 256
	cfg := vmm.Config{
		Kernel: env.Image.Kernel, Initramfs: env.Image.Initramfs, MemoryMiB: mib,
		Cmdline: "loglevel=8 earlyprintk=serial,ttyS0,115200 themis.test=early",
		Log:     zaptest.NewLogger(t),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	m, err := kvm.StartNoWait(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	lastRAM := fmt.Sprintf("BIOS-e820: [mem 0x0000000000100000-0x%016x] usable", mib<<20-1)
	want := []string{
		"Linux version 6.1.0",
		"Command line: console=ttyS0",
		"themis.test=early",
		"BIOS-e820: [mem 0x0000000000000000-0x000000000009fbff] usable",
		lastRAM,
	}
	start := time.Now()
	for {
		con := m.Console()
		missing := ""
		for _, w := range want {
			if !strings.Contains(con, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			t.Logf("kernel printed our command line and e820 map after %v", time.Since(start).Round(time.Millisecond))
			return
		}
		if err := m.Dead(); err != nil {
			var ee *kvm.ExitError
			if !errors.As(err, &ee) || ee.RIP == 0 {
				t.Errorf("the guest's end does not name an exit reason and RIP: %v", err)
			}
			t.Fatalf("guest stopped before printing %q: %v\nconsole:\n%s", missing, err, con)
		}
		if ctx.Err() != nil {
			t.Fatalf("no %q on the console after %v\nconsole:\n%s", missing, time.Since(start), con)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
