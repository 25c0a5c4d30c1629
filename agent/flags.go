package agent

// Linux open(2) flag bits, as Write and Create requests carry them (the
// host side of the protocol may not be Linux).
const (
	OpenWronly = 0o1
	OpenCreat  = 0o100
	OpenTrunc  = 0o1000
)
