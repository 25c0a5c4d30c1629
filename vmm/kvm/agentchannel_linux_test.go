package kvm_test

import (
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/themisfs/themis/internal/kvmtest"
	"github.com/themisfs/themis/vmm/kvm"
	"github.com/themisfs/themis/vmm/kvm/echo"
)

// TestAgentChannelChoice: once the agent is ready, the machine's agent
// channel is the console when the guest opened its port, else COM2; the
// chosen stream carries the guest's bytes (an echo guest's, on a bare
// machine).
func TestAgentChannelChoice(t *testing.T) {
	for _, tt := range []struct {
		ch   echo.Channel
		want string
	}{{echo.UART, kvm.ChannelUART}, {echo.Console, kvm.ChannelConsole}} {
		t.Run(string(tt.ch), func(t *testing.T) {
			kvmtest.Need(t)
			g, err := echo.Start(echo.Config{Channel: tt.ch, Size: 64}, zaptest.NewLogger(t), false)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := g.Close(); err != nil {
					t.Error(err)
				}
			})
			m := g.Machine()
			if name, st := kvm.AgentChannel(m); name != kvm.ChannelUART || st != m.COM2() {
				t.Fatalf("before the agent is ready: channel %s", name)
			}
			kvm.PickChannel(m)
			name, st := kvm.AgentChannel(m)
			if name != tt.want || (st == m.AgentPort()) != (tt.want == kvm.ChannelConsole) {
				t.Fatalf("channel %s, want %s", name, tt.want)
			}
			g.UseChannel(st)
			if err := g.Echo(2); err != nil {
				t.Fatal(err)
			}
		})
	}
}
