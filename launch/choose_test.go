package launch

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/themisfs/themis/errkind"
)

func TestChoose(t *testing.T) {
	t.Parallel()
	const qemuPath = "/usr/bin/qemu-system-x86_64"
	tests := []struct {
		name      string
		host      Host
		asked     string
		want      string // backend
		fallback  bool
		whyMatch  string // in Choice.Why, or in the error
		wantField bool   // a *FieldError naming "backend"
	}{
		{"auto hardware", Host{KVM: KVMHardware, QEMU: qemuPath}, "auto", KVM, true, "hardware virtualization", false},
		{"auto hardware no qemu", Host{KVM: KVMHardware}, "auto", KVM, true, "Go KVM backend", false},
		{"empty is auto", Host{KVM: KVMHardware}, "", KVM, true, "fall back to QEMU", false},
		{"auto pvm", Host{KVM: KVMPVM, QEMU: qemuPath}, "auto", QEMU, false, "not hardware virtualization", false},
		{"auto absent", Host{KVM: KVMAbsent, QEMU: qemuPath}, "auto", QEMU, false, "no /dev/kvm", false},
		{"auto absent no qemu", Host{KVM: KVMAbsent}, "auto", None, false, "install qemu-system-x86", false},
		{"auto pvm no qemu", Host{KVM: KVMPVM}, "auto", None, false, "install qemu-system-x86", false},
		{"qemu on hardware", Host{KVM: KVMHardware, QEMU: qemuPath}, "qemu", QEMU, false, "asked", false},
		{"qemu on pvm", Host{KVM: KVMPVM, QEMU: qemuPath}, "qemu", QEMU, false, "asked", false},
		{"kvm on hardware", Host{KVM: KVMHardware}, "kvm", KVM, false, "asked", false},
		{"kvm on pvm", Host{KVM: KVMPVM, KVMWhy: "no vmx or svm CPU flag"}, "kvm", "", false, "no vmx or svm CPU flag", true},
		{"kvm absent", Host{KVM: KVMAbsent, KVMWhy: "/dev/kvm: no such file"}, "kvm", "", false, "cannot boot", true},
		{"unknown", Host{KVM: KVMHardware, QEMU: qemuPath}, "bhyve", "", false, "want auto, qemu or kvm", true},
		{"case matters", Host{KVM: KVMHardware, QEMU: qemuPath}, "KVM", "", false, `backend: "KVM": want auto, qemu or kvm`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Choose(tt.host, tt.asked)
			if tt.wantField {
				var fe *errkind.FieldError
				if !errors.As(err, &fe) || fe.Field != "backend" || !strings.Contains(fe.Msg, fmt.Sprintf("%q", tt.asked)) {
					t.Fatalf("Choose(%+v, %q) error = %v; want a *FieldError for backend %q", tt.host, tt.asked, err, tt.asked)
				}
				if !strings.Contains(err.Error(), tt.whyMatch) {
					t.Errorf("error %q does not mention %q", err, tt.whyMatch)
				}
				return
			}
			if err != nil {
				t.Fatalf("Choose(%+v, %q): %v", tt.host, tt.asked, err)
			}
			if got.Backend != tt.want || got.Fallback != tt.fallback || !strings.Contains(got.Why, tt.whyMatch) {
				t.Errorf("Choose(%+v, %q) = %+v; want %s, fallback %v, why mentioning %q", tt.host, tt.asked, got, tt.want, tt.fallback, tt.whyMatch)
			}
		})
	}
}

// TestProbe checks Probe against itself: a consistent kind and evidence
// (the host's real /dev/kvm decides which).
func TestProbe(t *testing.T) {
	t.Parallel()
	h := Probe()
	switch h.KVM {
	case KVMHardware, KVMPVM, KVMAbsent:
	default:
		t.Fatalf("Probe().KVM = %q", h.KVM)
	}
	if h.KVMWhy == "" {
		t.Errorf("Probe() gives no reason for KVM %q", h.KVM)
	}
	if _, err := Choose(h, Auto); err != nil {
		t.Errorf("Choose(Probe(), auto): %v", err)
	}
}
