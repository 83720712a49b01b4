// Package nilcheck tells the adapters whether an interface argument holds
// nothing usable: nil itself, or a nil pointer, map, slice, func or channel
// in it (a typed nil, such as a nil *asynq.Client passed as an Enqueuer),
// whose first method call would panic.
package nilcheck

import "reflect"

// IsNil reports whether v is nil or holds a nil pointer, map, slice, func,
// channel or interface.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
