package world

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"
)

// The history of registry_changelog: what an operator of the source registries would have seen while the world was
// being born. See doc.go for the vocabulary.

// Registry words of registry_changelog.entity_type (rows about a registry rather than an object class).
const (
	subjectCollection      = "collection"
	subjectSource          = "source"
	subjectPivot           = "pivot"
	subjectLawJurisdiction = "law_jurisdiction"
	subjectMeasurement     = "measurement"
	subjectOwnership       = "ownership"
	subjectException       = "exception"
)

// Actions of registry_changelog.
const (
	actionCreate           = "create"
	actionUpdate           = "update"
	actionRegister         = "register"
	actionRetire           = "retire"
	actionSupersede        = "supersede"
	actionMerge            = "merge"
	actionCountChanged     = "count_changed"
	actionSourceChanged    = "source_changed"
	actionOwnerChanged     = "owner_changed"
	actionApprovalChanged  = "approval_changed"
	actionExceptionChanged = "exception_changed"
	actionAxisIntroduced   = "axis_introduced"
	actionPolicyChanged    = "policy_changed"
)

// Alert levels of registry_changelog.
const (
	alertInfo     = "info"
	alertWarning  = "warning"
	alertCritical = "critical"
)

// registryActors change registries (as opposed to objects).
var registryActors = []string{"gov:council", "ops:lan.nguyen", "ops:minh.tran", "ops:hoa.pham", "registry-sync-bot",
	"measurement-generator"}

// changelogColumns are the registry_changelog columns written by COPY.
var changelogColumns = []string{"id", "entity_type", "entity_code", "action", "timestamp", "alert_level", "resolved",
	"changed_by", "alert_detail"}

// change is one registry_changelog row before its id and timestamp are known.
type change struct {
	entityType, entityCode, action, level, changedBy, detail string
	resolved                                                 bool
}

// changeMaker draws changes; it is shared by the generated history and the live churn.
type changeMaker struct {
	r          *rand.Rand
	pivots     [][]any // pivot_definitions rows
	measureIDs []string
	ownerRows  [][]any // governance_object_ownership rows
	exceptions []exceptionRef
}

// exceptionRef is an exception and the time it was first granted (January 1 of the year in its id).
type exceptionRef struct {
	id    string
	since time.Time
}

func newChangeMaker(r *rand.Rand) *changeMaker {
	m := &changeMaker{r: r, pivots: pivotTable().rows, ownerRows: ownershipTable().rows}
	for _, row := range measurementTable().rows {
		m.measureIDs = append(m.measureIDs, row[0].(string))
	}
	for _, row := range exceptionTable().rows {
		id := row[0].(string)
		year, _ := strconv.Atoi(id[4:8]) // EXC-YYYY-NNN
		m.exceptions = append(m.exceptions, exceptionRef{id: id, since: time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC)})
	}
	return m
}

// objectChange is a change about one born object of class typeName with status status.
func (m *changeMaker) objectChange(typeName, code, collection, status, actor string) change {
	r := m.r
	c := change{entityType: typeName, entityCode: code}
	u := r.IntN(100)
	switch {
	case status == statusRetired && u < 70:
		c.action, c.detail = actionRetire, "status active -> retired in "+collection
	case status == statusSuperseded && u < 70:
		c.action, c.detail = actionSupersede, "status active -> superseded in "+collection
	case status == statusMerged && u < 70:
		c.action, c.detail = actionMerge, "status active -> merged in "+collection
	default:
		switch v := r.IntN(100); {
		case v < 15:
			c.action, c.detail = actionCreate, "created in "+collection
		case v < 50:
			c.action, c.detail = actionRegister, "registered in "+collection
		default:
			c.action, c.detail = actionUpdate, strconv.Itoa(1+r.IntN(6))+" attributes updated"
		}
	}
	if r.IntN(100) < 60 {
		c.changedBy = actor
	} else {
		c.changedBy = registryActors[1+r.IntN(4)]
	}
	m.level(&c)
	return c
}

// registryChange is a change at time at about a registry row; births(c) estimates the births of born collection c
// so far.
func (m *changeMaker) registryChange(at time.Time, births func(c int) int) change {
	r := m.r
	var c change
	c.changedBy = registryActors[r.IntN(len(registryActors)-1)]
	var granted []exceptionRef
	for _, e := range m.exceptions {
		if !e.since.After(at) {
			granted = append(granted, e)
		}
	}
	u := r.IntN(100)
	if u >= 96 && len(granted) == 0 {
		u = r.IntN(96)
	}
	switch {
	case u < 40: // collection
		c.entityType = subjectCollection
		all := len(bornCollections) + len(registryOnlyCollections)
		k := r.IntN(all)
		if k < len(bornCollections) && r.IntN(100) < 80 {
			c.entityCode = bornCollections[k].name
			before := births(k)
			after := before + 1 + r.IntN(40)
			c.action, c.detail = actionCountChanged, fmt.Sprintf("births %d -> %d", before, after)
			c.changedBy = "registry-sync-bot"
			break
		}
		if k < len(bornCollections) {
			c.entityCode = bornCollections[k].name
		} else {
			c.entityCode = registryOnlyCollections[k-len(bornCollections)].name
		}
		if r.IntN(6) == 0 {
			c.action, c.detail = actionCreate, "collection registered"
		} else {
			c.action, c.detail = actionUpdate, "collection metadata updated"
		}
	case u < 48: // source
		c.entityType = subjectSource
		c.entityCode = bornCollections[r.IntN(len(bornCollections))].name
		from, to := sourceImport, sourceBirthAPI
		if r.IntN(2) == 0 {
			from, to = sourceBirthAPI, sourceRegistrySync
		}
		c.action, c.detail = actionSourceChanged, "source_system "+from+" -> "+to
	case u < 58: // pivot
		c.entityType = subjectPivot
		p := m.pivots[r.IntN(len(m.pivots))]
		c.entityCode = p[0].(string)
		if r.IntN(10) < 4 {
			c.action, c.detail = actionAxisIntroduced, fmt.Sprintf("axis %s introduced for %s", p[1], p[2])
		} else {
			c.action, c.detail = actionUpdate, "pivot definition updated"
		}
	case u < 64: // law_jurisdiction
		c.entityType = subjectLawJurisdiction
		k := r.IntN(len(lawCodes))
		c.entityCode = lawCodes[k]
		c.changedBy = "gov:council"
		if r.IntN(10) < 7 {
			c.action, c.detail = actionPolicyChanged, "jurisdiction revised (scope "+lawScope(k, lawCodes[k])+")"
		} else {
			c.action, c.detail = actionUpdate, "jurisdiction notes updated"
		}
	case u < 80: // measurement
		c.entityType = subjectMeasurement
		c.entityCode = m.measureIDs[r.IntN(len(m.measureIDs))]
		switch v := r.IntN(10); {
		case v < 2:
			c.action, c.detail = actionCreate, "measurement defined"
			c.changedBy = "measurement-generator"
		case v < 7:
			c.action, c.detail = actionUpdate, "measurement query updated"
		default:
			c.action, c.detail = actionPolicyChanged, "measurement severity or comparison changed"
		}
	case u < 96: // ownership
		c.entityType = subjectOwnership
		row := m.ownerRows[r.IntN(len(m.ownerRows))]
		c.entityCode = strconv.FormatInt(row[0].(int64), 10)
		if r.IntN(10) < 8 {
			c.action, c.detail = actionOwnerChanged, fmt.Sprintf("owner of %s scope set to %s", row[1], row[4])
		} else {
			c.action, c.detail = actionApprovalChanged, fmt.Sprintf("ownership approval APR-%d-%04d recorded",
				2024+r.IntN(3), 1+r.IntN(400))
		}
	default: // exception
		c.entityType = subjectException
		c.entityCode = granted[r.IntN(len(granted))].id
		if r.IntN(10) < 6 {
			c.action, c.detail = actionExceptionChanged, fmt.Sprintf("expiry set to %d-%02d-28", 2025+r.IntN(4), 1+r.IntN(12))
		} else {
			c.action, c.detail = actionApprovalChanged, fmt.Sprintf("approval APR-%d-%04d recorded",
				2024+r.IntN(3), 1+r.IntN(400))
		}
	}
	m.level(&c)
	return c
}

// level draws the alert level and the resolved flag of a change from its action.
func (m *changeMaker) level(c *change) {
	var warn, crit int // percent
	switch c.action {
	case actionRetire, actionSupersede, actionMerge:
		warn, crit = 40, 5
	case actionCountChanged:
		warn, crit = 15, 5
	case actionPolicyChanged, actionExceptionChanged, actionApprovalChanged, actionOwnerChanged, actionSourceChanged:
		warn, crit = 35, 5
	default:
		warn, crit = 6, 1
	}
	var resolvedPct int
	switch u := m.r.IntN(100); {
	case u < crit:
		c.level, resolvedPct = alertCritical, 45
	case u < crit+warn:
		c.level, resolvedPct = alertWarning, 70
	default:
		c.level, resolvedPct = alertInfo, 95
	}
	c.resolved = m.r.IntN(100) < resolvedPct
}

// changelogTable draws n history rows interleaved with the births of p.
func changelogTable(p *birthPlan, n int, seed uint64) table {
	t := table{name: "registry_changelog", cols: changelogColumns}
	if n <= 0 {
		return t
	}
	r := rand.New(rand.NewPCG(seed, streamChangelog))
	m := newChangeMaker(r)
	at := make([]int64, n)
	spread(at, 0, endTime.Sub(baseTime).Microseconds(), r)
	t.rows = make([][]any, 0, n)
	for j := range n {
		// The births born by now: the change may only talk about them.
		k := sort.Search(len(p.at), func(i int) bool { return p.at[i] > at[j] })
		var c change
		ts := baseTime.Add(time.Duration(at[j]) * time.Microsecond)
		if k > 0 && r.IntN(100) < 75 {
			i := r.IntN(k)
			et := p.shape.types[p.typ[i]]
			c = m.objectChange(et.name, p.code(i), bornCollections[et.collection].name, statuses[p.status[i]],
				provenances[p.prov[i]].actor)
		} else {
			frac := float64(k) / float64(len(p.at))
			c = m.registryChange(ts, func(coll int) int { return int(float64(p.shape.collectionSizes[coll]) * frac) })
		}
		t.rows = append(t.rows, []any{int64(j + 1), c.entityType, c.entityCode, c.action, ts, c.level, c.resolved,
			c.changedBy, c.detail})
	}
	return t
}
