package protocol

// Compact prepares a read buffer for the next read after its unread bytes
// buf[r:w]: it moves them to the start and returns the buffer (possibly a
// new one) and their new end; they start at 0. The buffer grows to need
// bytes when need exceeds its length (a request or reply whose length is
// known), doubles when the unread bytes fill it, and is reused otherwise.
func Compact(buf []byte, r, w, need int) ([]byte, int) {
	n, size := w-r, len(buf)
	switch {
	case need > size:
		size = need
	case n == size:
		size = 2 * size
	}
	if size != len(buf) {
		nb := make([]byte, size)
		return nb, copy(nb, buf[r:w])
	}
	if r > 0 {
		copy(buf, buf[r:w])
	}
	return buf, n
}
