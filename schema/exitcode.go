package schema

// Exit codes of minfer. A program that drives minfer (abtest) tells a
// model that does not fit the machine from a defect of the path that ran
// by ExitOutOfMemory alone: it is no crash and no wrong answer.
const (
	ExitOK    = 0
	ExitError = 1 // any other failure
	ExitUsage = 2 // how minfer was called: flags, arguments, a lever's value
	// ExitOutOfMemory: the engine refused a model whose memory plan does
	// not fit the free memory (before allocating anything), or an
	// allocation failed for want of memory later; stderr's last line says
	// what it needed, what was free and what lowers it.
	ExitOutOfMemory = 3
	// ExitStaleKernels: the kernels file was not built from the kernel
	// sources this binary embeds (or carries no stamp); stderr's last
	// line names both hashes and the command that rebuilds it.
	ExitStaleKernels = 4
)
