package archive

import "time"

// SetAfterWrite runs fn on the data file Put has written, before Put reads it back: the tests
// damage the file there, as a bad disk or a bad copy would.
func SetAfterWrite(d *Dir, fn func(path string) error) { d.afterWrite = fn }

// SetClock stamps d's manifests with now.
func SetClock(d *Dir, now func() time.Time) { d.now = now }
