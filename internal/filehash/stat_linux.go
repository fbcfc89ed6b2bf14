package filehash

import (
	"fmt"
	"os"
	"syscall"
)

// stat is the file's identity; ok: the file system gives a change time.
func stat(path string) (identity, bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return identity{}, false, err
	}
	if !fi.Mode().IsRegular() {
		return identity{}, false, fmt.Errorf("%s is not a regular file", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return identity{}, false, nil
	}
	return identity{Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}, true, nil
}
