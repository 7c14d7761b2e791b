// Scores one run of the MCP conformance suite for scripts/conformance.sh.
//
//   node scripts/conformance-report.mjs --revision 2026-07-28 --results results/conformance/2026-07-28 \
//     --suite-dir .cache/conformance/node_modules/@modelcontextprotocol/conformance \
//     --expected conformance/expected-failures.yaml --suite-exit 1
//
// It reads the scenarios of the revision from the suite's own requirements
// file (scored: `server`; not scored: `not_scored` entries with leg: server)
// and each scenario's checks.json that the suite wrote under --results
// (server-<scenario>-<timestamp>/checks.json). A scenario fails when any of
// its checks has status FAILURE, or when it left no checks.json (it crashed
// or timed out), which is how the suite scores it too; WARNING, INFO and
// SKIPPED never fail. The suite's exit code (which counts scored scenarios
// only) must agree with that, or the report says so and fails.
//
// The expected-failures file lists, per revision, scored scenarios
// ("<scenario>") or single checks ("<scenario>:<check-id>") that are known to
// fail, each with a comment giving the reason. A listed entry that passes is
// stale and fails the run, so the file cannot hide a fixed scenario.
//
// It prints each failing scenario with its failed checks, writes
// summary.json and summary.txt (the two result lines) into --results, and
// exits 0 when every scored failure is expected, 1 when one is not (or an
// entry is stale), 2 when it cannot score the run.
//
// With --bridge it compares two runs of the suite against one upstream MCP
// server (mcp-go's conformance example), directly and through toolbus and
// `expert-agent bridge`, each already scored by the mode above (summary.json):
//
//   node scripts/conformance-report.mjs --bridge candidates|verdict --revision 2026-07-28 \
//     --direct results/conformance/mcpgo-direct/2026-07-28 --bridged results/conformance/mcpgo-bridge/2026-07-28 \
//     --suite-dir ... --expected conformance/expected-failures-bridge.yaml
//
// A scored scenario that passes directly but fails through the bridge is
// held against the bridge; one that fails directly never is. The expected
// file (same format as above) lists, per revision, such scenarios or checks
// that cannot pass through a bridge, each with its reason; a listed entry that
// passes through the bridge is reported, never failed (the upstream is flaky).
// `candidates` prints, one a line, the scenarios that pass directly, fail
// through the bridge and are not listed, for scripts/conformance.sh to run
// again, each on its own, under --bridged/retries/<scenario>/: direct-<n>,
// directly until it fails; then bridge-<n>, through the bridge until it
// passes. Then `verdict` decides each: when the upstream failed it directly
// with the very same failed checks and messages (loopback ports aside), the
// failure is the upstream's own flake (mcp-go drops a call's last
// notification now and then) and does not fail the run; otherwise it is a
// bridge failure, whether or not it passes through the bridge on its own
// (one that does depends on what ran before it). It prints the scenarios that
// pass directly but fail through the bridge with their failed checks, writes
// compare.json and compare.txt (the side-by-side score line, then those
// scenarios) into --bridged, and exits 0, 1 (a bridge failure) or 2.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    revision: { type: 'string' },
    results: { type: 'string' },
    'suite-dir': { type: 'string' },
    expected: { type: 'string' },
    'suite-exit': { type: 'string' },
    bridge: { type: 'string' },
    direct: { type: 'string' },
    bridged: { type: 'string' },
  },
});

class ReportError extends Error {}

function need(name) {
  if (!args[name]) throw new ReportError(`--${name} is required`);
  return args[name];
}

// The suite's own YAML parser, from the installed package's dependencies.
function loadYAML(suiteDir) {
  return createRequire(path.resolve(suiteDir, 'package.json'))('yaml');
}

function readRequirements(YAML, suiteDir, revision) {
  const file = path.join(suiteDir, 'requirements', `${revision}.yaml`);
  if (!fs.existsSync(file)) throw new ReportError(`the suite has no requirement set ${revision} (${file})`);
  const req = YAML.parse(fs.readFileSync(file, 'utf8')) ?? {};
  const scored = req.server ?? [];
  const notScored = (req.not_scored ?? []).filter((e) => e.leg === 'server');
  return {
    scored,
    notScored: notScored.map((e) => e.scenario),
    reasons: Object.fromEntries(notScored.map((e) => [e.scenario, e.reason])),
  };
}

// readExpected returns the entries for revision: [{scenario, checkId?, text}].
function readExpected(YAML, file, revision, knownRevisions) {
  if (!file || !fs.existsSync(file)) return [];
  const doc = YAML.parseDocument(fs.readFileSync(file, 'utf8'));
  if (doc.errors.length > 0) throw new ReportError(`${file}: ${doc.errors[0].message}`);
  const top = doc.contents;
  if (top == null || (YAML.isScalar(top) && top.value == null)) return [];
  if (!YAML.isMap(top)) throw new ReportError(`${file}: want a map from revision to a list of scenarios`);
  const out = [];
  for (const pair of top.items) {
    const rev = String(pair.key?.value ?? pair.key);
    if (!knownRevisions.includes(rev)) {
      throw new ReportError(`${file}: unknown revision "${rev}" (want one of ${knownRevisions.join(', ')}; quote it)`);
    }
    const seq = pair.value;
    if (seq == null || (YAML.isScalar(seq) && seq.value == null)) continue;
    if (!YAML.isSeq(seq)) throw new ReportError(`${file}: "${rev}" must be a list`);
    seq.items.forEach((item, i) => {
      if (!YAML.isScalar(item) || typeof item.value !== 'string' || item.value === '') {
        throw new ReportError(`${file}: "${rev}" item ${i + 1} must be a scenario name or scenario:check-id`);
      }
      // A comment on the line above the first item belongs to the list in
      // the YAML tree; it is that item's reason all the same.
      const reason = item.comment || item.commentBefore || (i === 0 ? seq.commentBefore : '');
      if (!reason || !reason.trim()) {
        throw new ReportError(`${file}: "${rev}" entry "${item.value}" has no comment saying why it cannot pass`);
      }
      if (rev !== revision) return;
      const [scenario, ...rest] = item.value.split(':');
      out.push({ scenario, checkId: rest.length ? rest.join(':') : undefined, text: item.value, reason: oneLine(reason) });
    });
  }
  return out;
}

// readResults maps each scenario to its checks, or null if it wrote none.
function readResults(dir, scenarios) {
  const entries = fs.existsSync(dir) ? fs.readdirSync(dir, { withFileTypes: true }) : [];
  const out = {};
  for (const scenario of scenarios) {
    const esc = scenario.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
    const re = new RegExp(`^server-${esc}-\\d{4}-\\d{2}-\\d{2}T[\\d-]+Z$`);
    const dirs = entries.filter((e) => e.isDirectory() && re.test(e.name)).map((e) => e.name).sort();
    if (dirs.length === 0) {
      out[scenario] = null;
      continue;
    }
    // One run per scenario; should there be more, the latest is the one that counts.
    const file = path.join(dir, dirs[dirs.length - 1], 'checks.json');
    try {
      out[scenario] = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (err) {
      out[scenario] = [{ id: 'checks.json', status: 'FAILURE', errorMessage: `unreadable ${file}: ${err.message}` }];
    }
  }
  return out;
}

function failures(checks) {
  if (checks === null) {
    return [{ id: '(no checks.json)', status: 'FAILURE', errorMessage: 'the scenario wrote no results (it crashed or timed out; see suite.log)' }];
  }
  return checks.filter((c) => c.status === 'FAILURE');
}

function oneLine(s, max = 240) {
  s = String(s ?? '').replace(/\s+/g, ' ').trim();
  return s.length > max ? s.slice(0, max - 1) + '…' : s;
}

function main() {
  const revision = need('revision');
  const resultsDir = need('results');
  const suiteDir = need('suite-dir');
  const suiteExit = Number(need('suite-exit'));
  const YAML = loadYAML(suiteDir);
  const knownRevisions = fs.readdirSync(path.join(suiteDir, 'requirements'))
    .filter((f) => f.endsWith('.yaml')).map((f) => f.slice(0, -5));
  const req = readRequirements(YAML, suiteDir, revision);
  const expected = readExpected(YAML, args.expected, revision, knownRevisions);

  for (const e of expected) {
    if (!req.scored.includes(e.scenario)) {
      const why = req.notScored.includes(e.scenario) ? 'is not scored, so it never fails the run' : 'is not a server scenario of this revision';
      throw new ReportError(`${args.expected}: "${revision}" entry "${e.text}": ${e.scenario} ${why}`);
    }
  }
  const wholeExpected = new Set(expected.filter((e) => !e.checkId).map((e) => e.scenario));
  const checkExpected = new Set(expected.filter((e) => e.checkId).map((e) => e.text));

  const results = readResults(resultsDir, [...req.scored, ...req.notScored]);
  const summary = {
    revision,
    scored: { passed: [], failed: [] },
    notScored: { passed: [], failed: [] },
    expectedFailures: [],
    unexpectedFailures: [],
    staleExpectations: [],
    failedChecks: {},
  };
  const lines = [];

  for (const scenario of [...req.scored, ...req.notScored]) {
    const isScored = req.scored.includes(scenario);
    const failed = failures(results[scenario]);
    const bucket = isScored ? summary.scored : summary.notScored;
    if (failed.length === 0) {
      bucket.passed.push(scenario);
      continue;
    }
    bucket.failed.push(scenario);
    summary.failedChecks[scenario] = failed.map((c) => ({ id: c.id, errorMessage: c.errorMessage ?? '' }));
    let tag;
    if (!isScored) {
      tag = `not scored: ${req.reasons[scenario] ?? 'not scored'}`;
    } else if (wholeExpected.has(scenario) || failed.every((c) => checkExpected.has(`${scenario}:${c.id}`))) {
      tag = 'expected';
      summary.expectedFailures.push(scenario);
    } else {
      tag = 'UNEXPECTED';
      summary.unexpectedFailures.push(scenario);
    }
    lines.push(`  ✗ ${scenario} (${tag})`);
    for (const c of failed) lines.push(`      ${c.id}: ${oneLine(c.errorMessage || c.description || '')}`);
  }

  for (const e of expected) {
    const checks = results[e.scenario];
    const failedIds = new Set(failures(checks).map((c) => c.id));
    const stale = e.checkId ? !failedIds.has(e.checkId) : failedIds.size === 0;
    if (stale) summary.staleExpectations.push(e.text);
  }

  const scoredFailed = summary.scored.failed.length;
  const agrees = (suiteExit === 0) === (scoredFailed === 0);
  summary.suiteExit = suiteExit;
  const resultLines = [
    `conformance ${revision}: ${summary.scored.passed.length} passed, ${scoredFailed} failed`,
    `conformance ${revision}, not-scored scenarios (reported, never gating): ${summary.notScored.passed.length} of ${summary.notScored.passed.length + summary.notScored.failed.length} pass`,
  ];
  fs.mkdirSync(resultsDir, { recursive: true });
  fs.writeFileSync(path.join(resultsDir, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
  fs.writeFileSync(path.join(resultsDir, 'summary.txt'), resultLines.join('\n') + '\n');

  console.log(`${revision}: ${lines.length ? 'failing scenarios' : 'no failing scenario'}`);
  for (const l of lines) console.log(l);
  for (const s of summary.staleExpectations) {
    console.log(`  ! ${s} is listed in ${args.expected} but passes: remove the entry`);
  }
  if (!agrees) {
    console.log(`  ! the suite exited ${suiteExit} but this report counts ${scoredFailed} failed scored scenario(s); see ${resultsDir}/suite.log`);
    return 2;
  }
  return summary.unexpectedFailures.length > 0 || summary.staleExpectations.length > 0 ? 1 : 0;
}

// failureSignature names a failed run by its failed checks and their
// messages, without the loopback ports that differ between the two setups.
function failureSignature(checks) {
  return failures(checks)
    .map((c) => `${c.id}: ${oneLine(c.errorMessage || c.description || '', 2000)}`.replace(/(localhost|127\.0\.0\.1|\[::1\]):\d+/g, '$1:PORT'))
    .sort()
    .join('\n');
}

function readSummary(dir) {
  const file = path.join(dir, 'summary.json');
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ReportError(`cannot read ${file} (was the run scored?): ${err.message}`);
  }
}

// readRetries returns the runs of one scenario under DIR/retries/<scenario>/
// named <kind>-<n>, in order: [{n, checks}] (checks null: it wrote none).
function readRetries(bridgedDir, scenario, kind) {
  const dir = path.join(bridgedDir, 'retries', scenario);
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir)
    .map((name) => /^(\w+)-(\d+)$/.exec(name))
    .filter((m) => m && m[1] === kind)
    .map((m) => ({ n: Number(m[2]), checks: readResults(path.join(dir, m[0]), [scenario])[scenario] }))
    .sort((a, b) => a.n - b.n);
}

function bridgeMain() {
  const mode = args.bridge;
  if (mode !== 'candidates' && mode !== 'verdict') throw new ReportError('--bridge must be candidates or verdict');
  const revision = need('revision');
  const suiteDir = need('suite-dir');
  const directDir = need('direct');
  const bridgedDir = need('bridged');
  const YAML = loadYAML(suiteDir);
  const knownRevisions = fs.readdirSync(path.join(suiteDir, 'requirements'))
    .filter((f) => f.endsWith('.yaml')).map((f) => f.slice(0, -5));
  const req = readRequirements(YAML, suiteDir, revision);
  const expected = readExpected(YAML, args.expected, revision, knownRevisions);
  for (const e of expected) {
    if (!req.scored.includes(e.scenario)) {
      const why = req.notScored.includes(e.scenario) ? 'is not scored, so it is never compared' : 'is not a server scenario of this revision';
      throw new ReportError(`${args.expected}: "${revision}" entry "${e.text}": ${e.scenario} ${why}`);
    }
  }
  const direct = readSummary(directDir);
  const bridged = readSummary(bridgedDir);
  const passedDirect = new Set(direct.scored.passed);
  const passedBridged = new Set(bridged.scored.passed);
  const fullRun = readResults(bridgedDir, req.scored);

  // listedFor returns the entries that cover scenario's failure through the
  // bridge (all of its failed checks), or null.
  const listedFor = (scenario) => {
    const entries = expected.filter((e) => e.scenario === scenario);
    if (entries.some((e) => !e.checkId)) return entries.filter((e) => !e.checkId);
    const failed = failures(fullRun[scenario]);
    const byCheck = failed.map((c) => entries.find((e) => e.checkId === c.id));
    return failed.length > 0 && byCheck.every(Boolean) ? byCheck : null;
  };

  const lost = req.scored.filter((s) => passedDirect.has(s) && !passedBridged.has(s));
  if (mode === 'candidates') {
    for (const s of lost) if (!listedFor(s)) console.log(s);
    return 0;
  }

  const verdicts = [];
  for (const scenario of lost) {
    const v = { scenario, failedChecks: failures(fullRun[scenario]).map((c) => ({ id: c.id, errorMessage: c.errorMessage ?? '' })) };
    const listed = listedFor(scenario);
    const bridgeRetries = readRetries(bridgedDir, scenario, 'bridge');
    const directRetries = readRetries(bridgedDir, scenario, 'direct');
    const passedRetry = bridgeRetries.find((r) => failures(r.checks).length === 0);
    const bridgedSigs = new Set([fullRun[scenario], ...bridgeRetries.map((r) => r.checks)].map(failureSignature));
    const sameDirect = directRetries.find((r) => failures(r.checks).length > 0 && bridgedSigs.has(failureSignature(r.checks)));
    const bridgeNote = bridgeRetries.length === 0 ? ''
      : passedRetry ? `; run on its own, it passed through the bridge on retry ${passedRetry.n} (so it depends on what ran before it)`
      : `; run on its own, it failed through the bridge ${bridgeRetries.length} more times`;
    if (listed) {
      v.verdict = 'expected';
      v.note = `expected: ${[...new Set(listed.map((e) => e.reason))].join('; ')}`;
    } else if (sameDirect) {
      v.verdict = 'upstream';
      v.note = `the upstream's own flake, not failed: run directly on its own, it failed the same way on retry ${sameDirect.n}${bridgeNote}`;
    } else {
      const otherwise = directRetries.filter((r) => failures(r.checks).length > 0).length;
      v.verdict = 'UNEXPECTED';
      v.note = `UNEXPECTED: run directly on its own, it ${otherwise ? 'failed otherwise' : 'passed'} ${directRetries.length} time(s)${bridgeNote}`;
    }
    verdicts.push(v);
  }

  const lines = [];
  for (const v of verdicts) {
    lines.push(`  ✗ ${v.scenario} (${v.note})`);
    for (const c of v.failedChecks) lines.push(`      ${c.id}: ${oneLine(c.errorMessage)}`);
  }
  const notes = [];
  for (const e of expected) {
    const checks = fullRun[e.scenario];
    const failedIds = new Set(failures(checks).map((c) => c.id));
    const passes = e.checkId ? !failedIds.has(e.checkId) : failedIds.size === 0;
    if (!passedDirect.has(e.scenario)) notes.push(`  · ${e.text} is listed in ${args.expected}; not compared (it fails directly)`);
    else if (passes) notes.push(`  ! ${e.text} is listed in ${args.expected} but passes through the bridge (reported only: the upstream is flaky; remove it if it keeps passing)`);
  }
  const gained = req.scored.filter((s) => !passedDirect.has(s) && passedBridged.has(s));
  for (const s of gained) notes.push(`  + ${s} fails directly but passes through toolbus+bridge`);

  const total = req.scored.length;
  const scoreLine = `conformance ${revision} mcp-go: direct ${direct.scored.passed.length}/${total}, through toolbus+bridge ${bridged.scored.passed.length}/${total} scored`;
  const unexpected = verdicts.filter((v) => v.verdict === 'UNEXPECTED').map((v) => v.scenario);
  const summaryLines = [scoreLine];
  if (verdicts.length) {
    summaryLines.push(`  passes direct, fails through the bridge: ${verdicts.map((v) => `${v.scenario} (${v.verdict})`).join(', ')}`);
  }
  fs.writeFileSync(path.join(bridgedDir, 'compare.json'), JSON.stringify({
    revision, total,
    direct: direct.scored.passed.length,
    bridged: bridged.scored.passed.length,
    passDirectFailBridge: verdicts,
    failDirectPassBridge: gained,
    unexpected,
  }, null, 2) + '\n');
  fs.writeFileSync(path.join(bridgedDir, 'compare.txt'), summaryLines.join('\n') + '\n');

  console.log(`${revision} mcp-go, direct vs through toolbus+bridge: ${verdicts.length ? 'scenarios that pass directly but fail through the bridge' : 'every scenario that passes directly passes through the bridge'}`);
  for (const l of [...lines, ...notes]) console.log(l);
  return unexpected.length > 0 ? 1 : 0;
}

try {
  process.exitCode = args.bridge !== undefined ? bridgeMain() : main();
} catch (err) {
  console.error(`conformance-report: ${err instanceof ReportError ? err.message : err.stack}`);
  process.exitCode = 2;
}
