package agent

import "strings"

// PortName is the name of the virtio-serial port that carries the agent
// channel where a backend offers one (the guest's
// /sys/class/virtio-ports/*/name); the agent falls back to the UART
// (/dev/ttyS1) on a machine without it. Only a multiport virtio console
// (VIRTIO_CONSOLE_F_MULTIPORT) names its ports: a backend that offers the
// channel there offers such a device, with a port of this name.
const PortName = "themis.agent"

// ReadyPath returns the guest device a ready line says the agent serves on
// ("themis-agent: ready on /dev/vport1p1" names /dev/vport1p1), and whether
// line is a ready line that names one. Text before ReadyLine (a console
// prefix) is ignored.
func ReadyPath(line string) (string, bool) {
	_, rest, ok := strings.Cut(line, ReadyLine+" on ")
	if !ok {
		return "", false
	}
	path := strings.TrimSpace(rest)
	return path, path != ""
}
