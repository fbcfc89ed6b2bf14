package schema

// DeviceMemory is bench's "device_memory" (issue 19): what the CUDA
// backend holds at the end of the run, by class (every allocation of its
// pool counted once, never freed before Close), the driver's view of the
// device, and the plan the engine checked at load. Bytes throughout.
type DeviceMemory struct {
	Backend string             `json:"backend"` // cuda
	Classes DeviceMemoryByKind `json:"classes"`
	// TotalBytes is the sum of the classes and the arena slack.
	TotalBytes uint64       `json:"total_bytes"`
	Driver     DriverMemory `json:"driver"`
	Plan       *MemoryPlan  `json:"plan,omitempty"`
}

// DeviceMemoryByKind is the backend's memory by class.
type DeviceMemoryByKind struct {
	Weights        uint64 `json:"weights_bytes"`         // the file's tensors as uploaded
	DerivedWeights uint64 `json:"derived_weights_bytes"` // copies made of them (MINFER_MMVQ_REPACK)
	KVCache        uint64 `json:"kv_cache_bytes"`        // KV regions and the cell-move scratch
	Activations    uint64 `json:"activations_bytes"`     // the graph's buffers and activation scratch
	Workspace      uint64 `json:"workspace_bytes"`       // kernel workspaces (split-K attention, MMQ)
	// HostMapped is weights in page-locked host memory mapped into the
	// device (MINFER_EMBED_HOST): host memory, not in TotalBytes.
	HostMapped uint64 `json:"host_mapped_bytes,omitempty"`
	// ArenaSlack is device memory the backend holds in its weight arenas'
	// chunks but has not handed out: in TotalBytes, in no class.
	ArenaSlack uint64 `json:"arena_slack_bytes"`
}

// DriverMemory is cuMemGetInfo's view: free when the backend opened
// (context and kernels loaded, nothing allocated), free and total at the
// end, and their difference (the classes, the driver's rounding, the
// captured graphs, and any other process's allocations meanwhile).
type DriverMemory struct {
	FreeAtOpenBytes    uint64 `json:"free_at_open_bytes"`
	FreeBytes          uint64 `json:"free_bytes"`
	TotalBytes         uint64 `json:"total_bytes"`
	UsedSinceOpenBytes uint64 `json:"used_since_open_bytes"`
}

// MemoryPlan is the engine's memory plan of a model at a context and KV
// format on one backend (engine/memplan), in `minfer info --json` with
// --device and in bench's device_memory.
type MemoryPlan struct {
	Model    string `json:"model"`
	Backend  string `json:"backend"`
	NCtx     int    `json:"n_ctx"`
	KVFormat string `json:"kv_format"`
	// The classes: the weights as the backend keeps them, the copies it
	// derives, the KV cache (with what each cell costs besides), the
	// scratch (graph buffers and the backend's own), and what the backend
	// holds before the first allocation.
	WeightsBytes  uint64 `json:"weights_bytes"`
	DerivedBytes  uint64 `json:"derived_bytes"`
	KVBytes       uint64 `json:"kv_bytes"`
	ScratchBytes  uint64 `json:"scratch_bytes"`
	OverheadBytes uint64 `json:"overhead_bytes"`
	TotalBytes    uint64 `json:"total_bytes"`
	// HostMappedBytes is weights kept in page-locked host memory mapped
	// into the device (MINFER_EMBED_HOST): outside TotalBytes and NeedBytes.
	HostMappedBytes uint64 `json:"host_mapped_bytes,omitempty"`
	// NeedBytes is what must fit in the free memory (the total less the
	// overhead, and less weights that stay a file mapping).
	NeedBytes     uint64 `json:"need_bytes"`
	MappedWeights bool   `json:"mapped_weights,omitempty"`
	// FreeBytes is the free memory the plan was checked against (absent
	// when none was read: no device), Fits and MaxCtx the answer (absent
	// with it).
	FreeBytes uint64 `json:"free_bytes,omitempty"`
	Fits      *bool  `json:"fits,omitempty"`
	MaxCtx    int    `json:"max_ctx,omitempty"`
}
