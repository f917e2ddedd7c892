package h1

import (
	"io"
	"net/http"
	"sync"
)

// copyBuffers are lent to response copies: without a pool every response
// would allocate its own.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// CopyResponse copies src to w, flushing after each read when streaming.
func CopyResponse(w http.ResponseWriter, src io.Reader, streaming bool) error {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	rc := http.NewResponseController(w)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if streaming {
				if err := rc.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
