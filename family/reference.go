package family

import "fmt"

// Reference is the lane a single-lane check compares with (themisctl
// check): a filesystem of another family, POSIX-complete, whose module is
// in every guest image of both kernel flavours (guest.DefaultModules and
// the ext module of each). It returns the lane spec and why that one.
func Reference(fs string) (lane, why string, err error) {
	f, err := Of(fs)
	if err != nil {
		return "", "", err
	}
	if f.Name == "ext" {
		return "xfs", "xfs: another family than ext, POSIX-complete, in every guest image", nil
	}
	return "ext2", fmt.Sprintf("ext2: the POSIX reference as Metis takes it, another family than %s", f.Name), nil
}
