// pdl.cuh: the entry every kernel begins with. Kernels are launched with
// programmatic dependent launch (cuda/driver LaunchPDL, lever MINFER_PDL=1):
// the next kernel on the stream may be scheduled while this one still runs.
// griddepcontrol.wait returns once the preceding kernel has completed and
// its writes are visible, so nothing is read early; launch_dependents, issued
// right after it, lets the following kernel's launch start now instead of at
// this kernel's exit (its blocks wait in their own entry). Without the launch
// attribute both instructions are no-ops. The rule "first statement of every
// extern "C" kernel" is checked by cuda's TestKernelSources_EveryKernelBeginsWithEntry.
#ifndef MINFER_PDL_CUH
#define MINFER_PDL_CUH

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MINFER_KERNEL_ENTRY()                                   \
    do {                                                        \
        asm volatile("griddepcontrol.wait;" ::: "memory");      \
        asm volatile("griddepcontrol.launch_dependents;" ::: ); \
    } while (0)
#else
#define MINFER_KERNEL_ENTRY() \
    do {                      \
    } while (0)
#endif

#endif // MINFER_PDL_CUH
