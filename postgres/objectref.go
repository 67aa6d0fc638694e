package postgres

import (
	"strings"

	"gcos"
)

// ObjectRef is a born object's address: collection_name:entity_code.
type ObjectRef struct {
	Collection string `json:"collection_name"`
	Code       string `json:"entity_code"`
}

func (o ObjectRef) String() string { return o.Collection + ":" + o.Code }

// ParseObjectRef validates "COLLECTION:CODE". Bad input is a clear EINVALID error.
func ParseObjectRef(s string) (ObjectRef, error) {
	if err := gcos.CheckObjectRef(s); err != nil {
		return ObjectRef{}, err
	}
	coll, code, _ := strings.Cut(s, ":")
	return ObjectRef{Collection: coll, Code: code}, nil
}

// Deref is *p, or "" for nil.
func Deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
