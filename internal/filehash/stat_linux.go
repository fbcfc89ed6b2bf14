package filehash

import "syscall"

// stat is the file's identity; ok: the file system gives a change time.
func stat(path string) (identity, bool, error) {
	fi, err := regular(path)
	if err != nil {
		return identity{}, false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return identity{}, false, nil
	}
	return identity{Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()}, true, nil
}
