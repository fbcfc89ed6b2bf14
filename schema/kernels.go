package schema

// Kernels is the kernels file a CUDA run loaded (issue 25): its path and
// sha256, and its stamp, the build it came from. minfer refuses a file
// whose Source is not the hash of the kernel sources it embeds, so a
// document that carries this block ran kernels of its binary's sources.
type Kernels struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	// Source is the hash of the kernel sources the file was built from
	// (cuda/kernels.Hash); Compiler and Flags as the build recorded them.
	Source   string `json:"source_sha256"`
	Compiler string `json:"compiler"`
	Flags    string `json:"flags"`
}
