// Package pid1 is what a static Go /init needs before it can do its job in
// a guest this project boots: the pseudo filesystems, a console on fds
// 0-2, the initramfs's kernel modules in order (finit_module), and a power
// off that never returns. Both inits use it: the guest agent
// (cmd/themis-agent) and the emulated AMD-V host's (cmd/themis-nested-init).
package pid1
