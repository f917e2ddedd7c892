package ocsf

// AfterWrite lets tests wait for each write attempt of e.
func AfterWrite(e *Emitter, f func()) { e.afterWrite = f }
