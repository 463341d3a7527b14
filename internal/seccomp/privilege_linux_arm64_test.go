package seccomp

// privilegeProbesArch: arm64 has only the *at calls, probed in common.
func privilegeProbesArch(func(string) string) probeList { return nil }
