// GCOS dashboard: polls the summary endpoints and renders them. Vanilla JS, no inline code (the CSP forbids it),
// text only through textContent. Signed in by the login link, the session cookie (HttpOnly, never seen here) goes
// with every request; else the token typed in lives in sessionStorage and is sent as a Bearer header.
(function () {
  'use strict';

  var TOKEN_KEY = 'gcos.readerToken';
  var POLL_MS = 2000;
  var LEDGER_EVERY = 5; // the ledger and the unread count are heavier: every 5th poll (10 s)
  var RING = 150;       // samples kept for the sparklines (5 minutes at 2 s)
  var SVG_NS = 'http://www.w3.org/2000/svg';
  var VERDICTS = ['relevant', 'not_relevant', 'class_0', 'deferred_birth', 'retired', 'needs_input', 'unknown', 'stale'];
  var LEDGER_COLS = ['total', 'covered', 'orphans', 'approved_exceptions', 'retired_or_ignored', 'stale', 'uncounted', 'deferred_birth', 'class_0', 'difference'];
  var CHANGES_SHOWN = 25;
  var COUNT_WINDOW_MS = 5 * 60 * 1000;

  var authRequired = document.body.getAttribute('data-auth') === 'token';
  var samples = { dirty: [], lag: [] };
  var tick = 0;

  function $(id) { return document.getElementById(id); }

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
  }

  function setStatus(text, ok) {
    var s = $('status');
    s.textContent = text;
    s.className = 'status ' + (ok ? 'ok' : 'err');
  }

  function get(path) {
    var headers = { 'Accept': 'application/json' };
    var t = token();
    if (t) { headers['Authorization'] = 'Bearer ' + t; }
    return fetch(path, { headers: headers, cache: 'no-store', credentials: 'same-origin' }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (!r.ok) {
          var msg = (body && body.error && body.error.message) || ('HTTP ' + r.status);
          var err = new Error(msg);
          err.status = r.status;
          throw err;
        }
        return body;
      });
    });
  }

  // post sends body as JSON and reads the answer as get does (same origin: the API's cross-origin check passes).
  function post(path, body) {
    var headers = { 'Accept': 'application/json', 'Content-Type': 'application/json' };
    var t = token();
    if (t) { headers['Authorization'] = 'Bearer ' + t; }
    return fetch(path, { method: 'POST', headers: headers, body: JSON.stringify(body), cache: 'no-store', credentials: 'same-origin' }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (answer) {
        if (!r.ok) {
          var err = new Error((answer && answer.error && answer.error.message) || ('HTTP ' + r.status));
          err.status = r.status;
          throw err;
        }
        return answer;
      });
    });
  }

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }

  function fmt(n) {
    if (n === null || n === undefined) { return '–'; }
    if (typeof n === 'number') { return n.toLocaleString('en-US', { maximumFractionDigits: 1 }); }
    return String(n);
  }

  // age clamps an age to zero: the database clock and a commit a microsecond later can make it -0.0001.
  function age(n) { return typeof n === 'number' ? Math.max(0, n) : n; }

  function fmtTime(s) {
    if (!s) { return '–'; }
    var d = new Date(s);
    return isNaN(d.getTime()) ? String(s) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  // asOf shows when a panel's numbers were read; data-asof keeps the exact instant the API answered with.
  function asOf(id, s) {
    var e = $(id);
    e.textContent = fmtTime(s);
    e.setAttribute('data-asof', s || '');
  }

  function replaceRows(tbodyId, rows, cols, emptyText) {
    var tb = $(tbodyId);
    while (tb.firstChild) { tb.removeChild(tb.firstChild); }
    if (rows.length === 0) {
      var tr = el('tr');
      var td = el('td', emptyText, 'muted');
      td.setAttribute('colspan', String(cols));
      tr.appendChild(td);
      tb.appendChild(tr);
      return;
    }
    rows.forEach(function (r) { tb.appendChild(r); });
  }

  function row(cells) {
    var tr = el('tr');
    cells.forEach(function (c) { tr.appendChild(c instanceof Node ? c : el('td', c)); });
    return tr;
  }

  function push(arr, v) {
    arr.push(v);
    while (arr.length > RING) { arr.shift(); }
  }

  // sparkline draws the samples so far across the SVG's 300×50 view box (a single sample as a flat line), scaled to
  // their maximum, which its title names; a line of zeros runs along the bottom, inside the box.
  function sparkline(svg, values) {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    if (values.length === 0) { return; }
    var vs = values.length === 1 ? [values[0], values[0]] : values;
    var max = Math.max.apply(null, vs.concat([1]));
    var step = 300 / (vs.length - 1);
    var pts = vs.map(function (v, i) {
      return (i * step).toFixed(1) + ',' + (46 - (v / max) * 42).toFixed(1);
    }).join(' ');
    var title = document.createElementNS(SVG_NS, 'title');
    title.textContent = values.length + ' samples, max ' + fmt(Math.max.apply(null, values));
    svg.appendChild(title);
    var line = document.createElementNS(SVG_NS, 'polyline');
    line.setAttribute('points', pts);
    svg.appendChild(line);
  }

  function bar(fraction) {
    var td = el('td', null, 'bar');
    var svg = document.createElementNS(SVG_NS, 'svg');
    svg.setAttribute('viewBox', '0 0 100 10');
    svg.setAttribute('preserveAspectRatio', 'none');
    var rect = document.createElementNS(SVG_NS, 'rect');
    rect.setAttribute('x', '0');
    rect.setAttribute('y', '0');
    rect.setAttribute('height', '10');
    rect.setAttribute('width', String(Math.max(0, Math.min(100, fraction * 100)).toFixed(1)));
    svg.appendChild(rect);
    td.appendChild(svg);
    return td;
  }

  function renderSummary(sum) {
    var verdicts = sum.verdicts || {};
    var names = VERDICTS.slice();
    Object.keys(verdicts).forEach(function (v) { if (names.indexOf(v) < 0) { names.push(v); } });
    var total = sum.groups || 0;
    replaceRows('verdict-rows', names.map(function (v) {
      var n = verdicts[v] || { groups: 0, objects: 0 };
      return row([v, fmt(n.groups), fmt(n.objects), bar(total ? n.groups / total : 0)]);
    }), 4, 'no groups');

    asOf('summary-asof', sum.as_of);
    asOf('dirty-asof', sum.as_of);
    asOf('findings-asof', sum.as_of);
    var h = sum.scan_health || {};
    push(samples.dirty, sum.dirty_groups || 0);
    push(samples.lag, h.scan_lag_seconds || 0);
    $('dirty-now').textContent = fmt(sum.dirty_groups);
    $('lag-now').textContent = fmt(h.scan_lag_seconds);
    $('failed-now').textContent = fmt(h.failed_groups);
    $('expired-now').textContent = fmt(h.expired_groups);
    $('unseeded-now').textContent = fmt(h.unseeded_groups);
    sparkline($('dirty-spark'), samples.dirty);
    sparkline($('lag-spark'), samples.lag);

    var rs = sum.ruleset;
    fillList('ruleset-info', rs ? [
      ['version', rs.ruleset_version], ['status', rs.status], ['proposed by', rs.proposed_by],
      ['activated', fmtTime(rs.activated_at)], ['activated by', rs.activated_by || '–'], ['approval', rs.approval_ref || '–']
    ] : [['version', 'none computed yet']]);
    var snap = sum.last_snapshot;
    fillList('snapshot-info', snap ? [['id', snap.id], ['scope', snap.scope], ['captured', fmtTime(snap.snapshot_at)]]
      : [['id', 'none yet']]);
    $('findings-open').textContent = fmt(sum.open_findings_total);
  }

  function fillList(id, pairs) {
    var dl = $(id);
    while (dl.firstChild) { dl.removeChild(dl.firstChild); }
    pairs.forEach(function (p) { dl.appendChild(el('dt', p[0])); dl.appendChild(el('dd', p[1])); });
  }

  function renderLedger(rep) {
    $('ledger-snapshot').textContent = rep.snapshot_id === null || rep.snapshot_id === undefined ? '–' : String(rep.snapshot_id);
    asOf('ledger-asof', rep.as_of);
    replaceRows('ledger-rows', (rep.ledgers || []).map(function (l) {
      var cells = [l.scope];
      LEDGER_COLS.forEach(function (c) {
        var td = el('td', fmt(l[c]));
        td.setAttribute('data-col', c);
        cells.push(td);
      });
      cells.push(el('td', l.closes ? 'yes' : 'NO', l.closes ? 'yes' : 'no'));
      var tr = row(cells);
      tr.setAttribute('data-scope', l.scope);
      return tr;
    }), 12, 'no ledger yet (no full snapshot)');
  }

  function renderWorkers(rep) {
    asOf('workers-asof', rep.at);
    replaceRows('worker-rows', (rep.workers || []).map(function (w) {
      return row([w.executor_name, el('td', w.state, 'state-' + w.state), fmt(age(w.age_seconds)), fmt(w.silent_after_seconds),
        el('td', w.last_tick_status || '–', 'text')]);
    }), 5, 'no gcos.* heartbeats yet');
    replaceRows('lease-rows', (rep.leases || []).map(function (l) {
      var holder = l.holder ? (l.holder + (l.held ? '' : ' (expired)')) : 'free';
      return row([l.role, el('td', holder, l.held ? 'text state-ok' : 'text muted'), l.held ? fmtTime(l.expires_at) : '–', fmt(l.epoch)]);
    }), 4, 'no role taken yet');
    replaceRows('cursor-rows', (rep.cursors || []).map(function (c) {
      var pos = c.position_at ? fmtTime(c.position_at) + ' / ' + c.position_id : 'start';
      return row([c.source, el('td', pos, 'text'), fmt(age(c.position_age_seconds)), fmt(c.events_seen), fmt(c.dead_lettered)]);
    }), 5, 'no intake cursors yet');
  }

  // explainCell links a finding to its explanation; the link is fetched with the token and shown below the table.
  function explainCell(f) {
    var td = el('td');
    if (!f.explain || !f.explain.path) { td.textContent = '–'; return td; }
    var a = el('a', f.explain.group ? 'group' : 'object');
    a.href = f.explain.path;
    a.setAttribute('data-explain', f.explain.path);
    a.addEventListener('click', function (ev) {
      ev.preventDefault();
      var view = $('explain-view');
      view.hidden = false;
      view.textContent = 'loading ' + f.explain.path + '…';
      get(f.explain.path).then(function (body) {
        view.textContent = 'finding ' + f.id + ' (' + f.coalesce_key + ')\n' + JSON.stringify(body, null, 2);
      }).catch(function (err) { view.textContent = f.explain.path + ': ' + err.message; });
    });
    td.appendChild(a);
    return td;
  }

  function renderFindings(rep) {
    replaceRows('finding-rows', (rep.findings || []).map(function (f) {
      return row([fmtTime(f.last_seen_at), el('td', f.issue_type, 'left'), el('td', f.severity, 'sev-' + f.severity),
        el('td', f.coalesce_key, 'text'), fmt(f.occurrence_count), f.status, explainCell(f)]);
    }), 7, 'no findings');
  }

  function renderMe(me) {
    $('me-principal').textContent = me.principal;
    $('me-unread').textContent = fmt(me.unread) + (me.unread_more ? '+' : '');
    $('me-unread').setAttribute('data-unread', String(me.unread));
  }

  function change(c) {
    var subject = c.subject === 'object' ? (c.object_ref || c.key) : ('group ' + c.key.slice(0, 12) + '…');
    var cov = (c.coverage_before || c.coverage_after) ? ((c.coverage_before || '–') + ' → ' + (c.coverage_after || '–')) : '–';
    var verdict = c.verdict_before === c.verdict_after ? c.verdict_after : (c.verdict_before + ' → ' + c.verdict_after);
    var tr = row([fmtTime(c.changed_at), el('td', subject, 'text'), el('td', c.scope || '–', 'left'), verdict, cov, el('td', c.why, 'left'),
      c.latency_seconds === null || c.latency_seconds === undefined ? '–' : c.latency_seconds.toFixed(2)]);
    tr.setAttribute('data-change', String(c.id));
    return tr;
  }

  // The live feed: the newest changes once, then every later one as GET /v1/changes/watch streams it (Server-Sent
  // Events read through fetch, so the reader token travels as a header, as on every other request). A dropped
  // stream is resumed by the next poll from the last event's id: no change is missed or shown twice.
  var feed = { rows: [], cursor: '', running: false };

  function renderFeed() {
    replaceRows('change-rows', feed.rows.map(change), 7, 'no verdict change yet');
  }

  function startFeed() {
    if (feed.running) { return; }
    feed.running = true;
    var begin = feed.cursor ? Promise.resolve() : get('/v1/changes?limit=' + CHANGES_SHOWN).then(function (rep) {
      feed.rows = rep.changes || [];
      feed.cursor = rep.next;
      asOf('changes-asof', rep.as_of);
      renderFeed();
    });
    begin.then(watchFeed).catch(function (err) {
      // The next poll resumes from the cursor; one the log no longer honours (410: changes after it were pruned)
      // starts over from the newest changes.
      if (err && err.status === 410) { feed.cursor = ''; }
    }).then(function () {
      feed.running = false;
    });
  }

  function watchFeed() {
    var headers = { 'Accept': 'text/event-stream', 'Last-Event-ID': feed.cursor };
    var t = token();
    if (t) { headers['Authorization'] = 'Bearer ' + t; }
    return fetch('/v1/changes/watch', { headers: headers, cache: 'no-store', credentials: 'same-origin' }).then(function (r) {
      if (!r.ok || !r.body) {
        var err = new Error('watch: HTTP ' + r.status);
        err.status = r.status;
        throw err;
      }
      var reader = r.body.getReader();
      var decoder = new TextDecoder();
      var buf = '';
      function pump() {
        return reader.read().then(function (res) {
          if (res.done) { return null; }
          buf += decoder.decode(res.value, { stream: true });
          var i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            onFeedEvent(buf.slice(0, i));
            buf = buf.slice(i + 2);
          }
          return pump();
        });
      }
      return pump();
    });
  }

  function onFeedEvent(block) {
    var id = '', data = '', type = 'message';
    block.split('\n').forEach(function (line) {
      if (line.indexOf('id: ') === 0) { id = line.slice(4); }
      else if (line.indexOf('event: ') === 0) { type = line.slice(7); }
      else if (line.indexOf('data: ') === 0) { data += line.slice(6); }
    });
    if (type !== 'change' || !data) { return; }
    var c = JSON.parse(data);
    feed.cursor = id;
    feed.rows.unshift(c);
    if (feed.rows.length > CHANGES_SHOWN) { feed.rows.length = CHANGES_SHOWN; }
    asOf('changes-asof', c.changed_at);
    renderFeed();
  }

  function renderChangeCount(rep) {
    var n = (rep.changes || []).length;
    $('changes-count').textContent = n >= 500 ? '500 or more' : String(n);
  }

  function poll() {
    if (authRequired && !token()) {
      setStatus('open the login link gcos up printed (gcos login mints another), or enter a reader token', false);
      return;
    }
    var heavy = tick % LEDGER_EVERY === 0; // the first poll too, so no figure waits for the tenth second
    var jobs = [
      get('/v1/summary').then(renderSummary),
      get('/v1/workers').then(renderWorkers),
      get('/v1/findings?limit=20').then(renderFindings)
    ];
    startFeed();
    if (heavy) {
      // The count of the last 5 minutes, by the server's clock (the as_of of a read of the log).
      jobs.push(get('/v1/changes?limit=1').then(function (rep) {
        var since = new Date(new Date(rep.as_of).getTime() - COUNT_WINDOW_MS).toISOString();
        return get('/v1/changes?limit=500&since=' + encodeURIComponent(since)).then(renderChangeCount);
      }));
      jobs.push(get('/v1/invariant').then(renderLedger));
      jobs.push(get('/v1/me').then(renderMe)); // the unread count reads the caller's notifications: not every poll
    }
    tick++;
    Promise.all(jobs).then(function () {
      setStatus('live · updated ' + new Date().toLocaleTimeString(), true);
    }).catch(function (err) {
      if (err.status === 401 || err.status === 403) {
        setStatus('token refused: ' + err.message, false);
      } else {
        setStatus('error: ' + err.message, false);
      }
    });
  }

  // The preview form: the fields each kind reads (the rest are hidden and never sent).
  var PREVIEW_FIELDS = {
    owner_revoke: ['ownership_id'],
    owner_assign: ['scope', 'owner_ref', 'entity_type', 'collection'],
    exception_grant: ['approval_ref', 'scope', 'entity_type', 'collection', 'entity_code', 'expires_at'],
    exception_revoke: ['exception_id'],
    coverage_status: ['collection', 'coverage_status']
  };
  var PREVIEW_BUCKETS = ['covered', 'orphans', 'approved_exceptions', 'retired_or_ignored', 'stale', 'deferred_birth', 'class_0'];

  function renderPreview(rep) {
    var f = rep.flips || {};
    var s = $('preview-summary');
    s.textContent = rep.action + ' decisions that flip: ' + fmt(f.allow_to_block) + ' allow → block, ' +
      fmt(f.block_to_allow) + ' block → allow · ' + fmt(rep.changed_groups) + ' groups change of ' +
      fmt(rep.affected_groups) + ' judged · as of ' + fmtTime(rep.as_of);
    s.dataset.allowToBlock = String(f.allow_to_block);
    s.dataset.blockToAllow = String(f.block_to_allow);
    var rows = [];
    [['allow → block', f.first_allow_to_block], ['block → allow', f.first_block_to_allow]].forEach(function (d) {
      (d[1] || []).forEach(function (x) {
        var tr = row([d[0], el('td', x.object, 'left'), el('td', (x.after || []).join('; '), 'text')]);
        tr.dataset.object = x.object;
        rows.push(tr);
      });
    });
    replaceRows('preview-flips', rows, 3, 'no decision flips');
    replaceRows('preview-ledgers', (rep.ledgers || []).map(function (l) {
      return row([l.scope].concat(PREVIEW_BUCKETS.map(function (b) {
        var n = (l.delta || {})[b] || 0;
        return n > 0 ? '+' + fmt(n) : fmt(n);
      })));
    }), PREVIEW_BUCKETS.length + 1, 'no ledger moves');
  }

  function setupPreview() {
    var form = $('preview-form');
    if (!form) { return; }
    var kind = $('preview-kind');
    function show() {
      var fields = PREVIEW_FIELDS[kind.value];
      Array.prototype.forEach.call(form.querySelectorAll('label[data-for]'), function (l) {
        l.hidden = fields.indexOf(l.getAttribute('data-for')) < 0;
      });
    }
    kind.addEventListener('change', show);
    show();
    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      var change = { kind: kind.value };
      PREVIEW_FIELDS[kind.value].forEach(function (name) {
        var v = form.elements[name].value.trim();
        if (v === '') { return; }
        if (name === 'ownership_id') { v = Number(v); }
        if (name === 'expires_at') { v = new Date(v).toISOString(); }
        change[name] = v;
      });
      var s = $('preview-summary');
      s.textContent = 'previewing…';
      delete s.dataset.allowToBlock;
      delete s.dataset.blockToAllow;
      post('/v1/preview', { changes: [change] }).then(renderPreview).catch(function (err) {
        s.textContent = 'refused: ' + err.message;
        replaceRows('preview-flips', [], 3, '');
        replaceRows('preview-ledgers', [], PREVIEW_BUCKETS.length + 1, '');
      });
    });
  }

  function setupToken() {
    var form = $('token-form');
    if (!form) { return; }
    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      var input = $('token');
      try { sessionStorage.setItem(TOKEN_KEY, input.value.trim()); } catch (e) { /* storage disabled */ }
      input.value = '';
      tick = 0;
      poll();
    });
    $('token-clear').addEventListener('click', function () {
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* storage disabled */ }
      setStatus('token forgotten', false);
    });
  }

  document.addEventListener('DOMContentLoaded', function () {
    setupToken();
    setupPreview();
    poll();
    setInterval(poll, POLL_MS);
  });
}());
