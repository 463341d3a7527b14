package local

// Unlimited, as a SandboxSpec's Memory, Pids or Disk (or CPUs) for the local
// provider, asks for no limit at all. Zero asks for the default
// (DefaultLimits): a default local sandbox cannot take the host down. Only
// an operator should pass Unlimited (runbox up --memory 0, --pids 0,
// --disk 0).
const Unlimited = -1
