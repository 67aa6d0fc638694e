package gcos

import "slices"

// Reasons an object has its own row (doc 40 §40.6, SPEC §7).
const (
	ObjectRowIndependentlyAuthoritative = "independently_authoritative"
	ObjectRowHighRiskWritePath          = "high_risk_write_path"
	ObjectRowException                  = "exception"
	ObjectRowOpenFinding                = "open_finding"
)

// ObjectRowReasons lists every reason (the CHECK list of governance_candidate_object.materialization_reason).
var ObjectRowReasons = []string{ObjectRowIndependentlyAuthoritative, ObjectRowHighRiskWritePath, ObjectRowException,
	ObjectRowOpenFinding}

// ObjectRowClassReason is why every (non-child) object of a class has its own row, or "" when its class gives it
// none: an independently authoritative class, or a write-path class whose risk class is one of objectRisk (the
// gate's object_risk_classes; a class without a risk class is of unknown risk).
func ObjectRowClassReason(p CoverageProfileRow, objectRisk []string) string {
	risk := UnknownRisk
	if p.RiskClass != nil && *p.RiskClass != "" {
		risk = *p.RiskClass
	}
	switch {
	case p.IndependentlyAuthoritative:
		return ObjectRowIndependentlyAuthoritative
	case p.WritePath && slices.Contains(objectRisk, risk):
		return ObjectRowHighRiskWritePath
	}
	return ""
}
