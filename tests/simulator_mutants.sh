#!/usr/bin/env bash
# The simulator's mutation check (`make mutants`): each one-line bug below is applied to the
# pure rules in turn, the simulator runs the schedules `make test` runs (CTR_SIM_SCHEDULES,
# 10,000 by default), and the bug must make it fail; the source is restored after each, also
# when the script is interrupted. Prints one line per mutant (caught at which seed, or
# SURVIVED) and exits 1 when one survives. Not part of `make test` (a build per mutant:
# about a minute each); docs/CLUSTER.md lists what it found.
set -euo pipefail
cd "$(dirname "$0")/.."
SCHEDULES=${CTR_SIM_SCHEDULES:-10000}
CARGO=${CARGO:-cargo}
# A target directory of its own: the mutants never reach target/release, which the server
# tests load.
export CARGO_TARGET_DIR=${MUTANTS_TARGET_DIR:-target/mutants}

# Each mutant: its name, its file, the exact text it changes (found once), the replacement.
mutant() { NAMES+=("$1"); FILES+=("$2"); FROMS+=("$3"); TOS+=("$4"); }
NAMES=() FILES=() FROMS=() TOS=()
mutant "a restored key keeps every outbox entry" src/counter/transfer.rs \
  '    from.is_empty() || from == name || (both_holders && same_spread(from, name))' '    true'
mutant "spread membership by the id alone" src/counter/spread.rs \
  'x.spread_id == y.spread_id && x.home == y.home,' 'x.spread_id == y.spread_id,'
mutant "a fold matched by its id alone" src/counter/transfer.rs \
  '.position(|l| l.fold_id == fold_id && l.name == giver)' '.position(|l| l.fold_id == fold_id)'
mutant "a fold's carrier found by its id alone" src/counter/transfer.rs \
  '.filter(move |o| o.fold_id != 0 && o.from == holder)' '.filter(move |o| o.fold_id != 0)'
mutant "a restored copy of the home never detached" src/counter/collect.rs \
  '        if self.carried_home == self.name {' '        if true {'
mutant "two transfers in one millisecond share a seq" src/counter/transfer.rs \
  '    last.saturating_add(1).max(by_time)' '    by_time.max(1)'
mutant "a refusal made final while budget travels" src/counter/transfer.rs \
  '        let moving = |o: &Outgoing| kind.moved(o.units()) > 0;' \
  '        let moving = |o: &Outgoing| kind == BudgetKind::Up && kind.moved(o.units()) > 0;'
mutant "the audit reports without its grace" src/counter/audit.rs \
  '                if now.saturating_sub(since) < grace {' '                if false {'
mutant "the audit's Gone answered before the replica holds the DEL" src/counter/audit.rs \
  '    answers.iter().any(|(_, a)| *a == Answer::Gone)' '    answers.is_empty()'
mutant "an audit answer taken from any master or request" src/counter/audit.rs \
  '        if s.asked.as_ref() != Some(from) {' '        if false {'
mutant "a holder takes a sibling's move" src/counter/transfer.rs \
  '            return holder.home == from;' '            return true;'
mutant "a settled gather's values shifted off the read's own" src/protocol/gather.rs \
  '                reading.values.truncate(1);' '                reading.values.truncate(0);'
mutant "the list at a time leaves folded holders out" src/counter/listing.rs \
  'e.unlisted_at.is_none_or(|end| at < end))' 'e.unlisted_at.is_none())'
mutant "the list at a time takes holders listed after it" src/counter/listing.rs \
  '.filter(|e| e.listed_at <= at && ' '.filter(|e| '
mutant "the listing gate opens before the replica acknowledges" src/protocol/listing_gate.rs \
  '        if acked.is_none_or(|acked| acked >= offset) {' '        if true {'
mutant "list changes dated by the clock alone after a take-over" src/protocol/listing_gate.rs \
  '        now.max(self.dates_after)' '        now.max(i64::MIN)'
mutant "the holder check passes any name of a spread home" src/counter/collect.rs \
  '        .is_some_and(|s| s.holders.iter().any(|h| h == name))' '        .is_some_and(|_| true)'
mutant "an acknowledgement sent before the replicas hold its credit" src/protocol/transfer_node.rs \
  '            for a in take_open(&mut self.acks, r, |a| &mut a.gate) {' '            for a in std::mem::take(&mut self.acks) {'
mutant "a key's messages sent before the replicas hold its write" src/protocol/transfer_node.rs \
  '(self.registry.get_mut(&key)).is_some_and(|d| d.gate.open(r))' '(self.registry.get_mut(&key)).is_some()'
mutant "a credit to a missing home answered as a repeat" src/protocol/transfer_node.rs \
  '        return (CreditOutcome::NotYet, None);' '        return (CreditOutcome::Repeat, None);'
mutant "a renamed holder's fold sealed anew under its old name" src/protocol/transfer_node.rs \
  '            Some(true) if self.retarget_carried_fold(host, &m) => return,' '            Some(true) if false => return,'
mutant "a collection started before the replicas hold the home's DEL" src/protocol/collect_node.rs \
  '            if !replication.as_ref().is_some_and(|r| c.gate.open(r)) {' '            if false {'
mutant "a move to a renamed home's former name never re-targeted" src/protocol/transfer_node.rs \
  '        if m.fold_id != 0 {' '        if true {'
mutant "a holder's second move to its renamed home before the first is answered" src/counter/transfer.rs \
  '            && moves_to_its_home(name, receiver)' '            && false'
mutant "a rebalance poll while the home folds holders back" src/protocol/rebalance_node.rs \
  '    let c = c.filter(|c| c.leaving().is_empty())?;' '    let c = c?;'
mutant "a round's reports without the budget moving out" src/protocol/rebalance_node.rs \
  'c.map_or((0, 0), |c| (kind.budget(c), c.budget_moving_out(kind, now)))' \
  'c.map_or((0, 0), |c| (kind.budget(c), 0))'
mutant "a round blind to credits landing at its home" src/protocol/rebalance_node.rs \
  '    t.inbox.iter().flat_map(|a| [a.giver_id, a.seq]).collect()' '    Vec::new()'
mutant "a write makes a key at a sealed holder's name renamed away" src/protocol/transfer_node.rs \
  '        !(self.tracked_where(host, |c| c.carries_a_fold_of(name))).is_empty()' '        false'
mutant "a planned holder name answered free where a key sits" src/protocol/admission_node.rs \
  '        Some(true) => NameAnswer::Free,' '        Some(_) => NameAnswer::Free,'
mutant "the home side answers listed for any name of a living home" src/protocol/holder_check_node.rs \
  '            return listed(lists == Some(true));' '            return listed(lists.is_some());'
mutant "a name answered by a master that does not serve it" src/protocol/admission_node.rs \
  '    if !host.select_db(0) || !host.serves(name) {' '    if !host.select_db(0) {'
mutant "a credit applied by a master that does not serve its receiver" src/protocol/transfer_node.rs \
  '        if host.holds_credits() || !host.serves(&m.receiver) {' '        if host.holds_credits() {'
mutant "a holder's demand reported by a master that does not serve it" src/protocol/rebalance_node.rs \
  '        if !host.serves(name) {
            return HolderDemand::NotHere;' '        if false {
            return HolderDemand::NotHere;'
mutant "a holder answered not here counted as 0" src/protocol/gather_node.rs \
  '        HolderAnswer::NotHere => Err(GatherFailure::Moving(name.to_vec())),' \
  '        HolderAnswer::NotHere => Ok((0, None)),'
mutant "a folded holder gives a grant back" src/counter/bounds.rs \
  '            Intent::GRANT if self.is_sealed() => Ok(RefundPlan::Folded {' \
  '            Intent::GRANT if false => Ok(RefundPlan::Folded {'
mutant "a folded holder passes a purchase on before its fold lands" src/counter/transfer.rs \
  '        self.is_sealed() && !self.fold_landed()' \
  '        false'
mutant "a refund sent home before its fold lands" src/counter/bounds.rs \
  '                landed: self.fold_landed(),' \
  '                landed: self.is_sealed(),'
mutant "a refund remembered as its grant" src/counter/bounds.rs \
  '        self.keep_record(op.fp, grant.expires_at, Intent::REFUNDED, op.units);' \
  '        self.keep_record(op.fp, grant.expires_at, Intent::GRANT, op.units);'
mutant "a refusal under a ceiling made final while up-budget travels" src/counter/transfer.rs \
  '        let moving = |o: &Outgoing| kind.moved(o.units()) > 0;' \
  '        let moving = |o: &Outgoing| kind == BudgetKind::Down && kind.moved(o.units()) > 0;'
mutant "a credit's ceiling units applied twice" src/counter/transfer.rs \
  '        self.shift(c.units(), make)?;' \
  '        self.shift(Units { dc: c.dc.saturating_mul(2), ..c.units() }, make)?;'
mutant "a giver's ceiling not lowered at its debit" src/counter/transfer.rs \
  '        let debit = units.negated().ok_or(CounterError::Overflow)?;' \
  '        let debit = Units { dc: 0, ..units.negated().ok_or(CounterError::Overflow)? };'
mutant "a fold that forgets its ceiling units" src/counter/transfer.rs \
  '            dc: self.ceiling().map_or(0, |c| c.ceiling),' \
  '            dc: 0,'
mutant "a refused ceiling move rolled back without its units" src/counter/transfer.rs \
  '        if let Err(e) = self.shift(entry.units(), MadeBounds::default()) {' \
  '        if let Err(e) = self.shift(Units { dc: 0, ..entry.units() }, MadeBounds::default()) {'
mutant "a ceiled holder unbounded from above before its first credit" src/counter/spread.rs \
  '            ceiling: is_ceiled_holder(&h).then_some(0),' \
  '            ceiling: None,'
mutant "a ceiled holder's first credit leaves it unceiled" src/counter/transfer.rs \
  '            ceiling: budget_move && ceiled,' \
  '            ceiling: budget_move && c.dc != 0,'
mutant "a round reads every spread's budget as a floor's" src/protocol/rebalance_node.rs \
  '    BudgetKind::of_member(name, c).map_or(BudgetKind::Down, |(_, kind)| kind)' \
  '    BudgetKind::Down'

backup=""
restore() { [ -n "$backup" ] && cp "$backup" "$file" && rm -f "$backup"; backup=""; }
trap restore EXIT INT TERM

survived=0
for i in "${!NAMES[@]}"; do
  name=${NAMES[$i]} file=${FILES[$i]} from=${FROMS[$i]} to=${TOS[$i]}
  # MUTANTS=<pattern>: only the mutants whose name matches (grep -E).
  if [ -n "${MUTANTS:-}" ] && ! grep -qE -- "$MUTANTS" <<<"$name"; then
    continue
  fi
  backup=$(mktemp)
  cp "$file" "$backup"
  MUT_FROM=$from MUT_TO=$to python3 - "$file" <<'EOF'
import os, sys
path = sys.argv[1]
text = open(path).read()
old, new = os.environ["MUT_FROM"], os.environ["MUT_TO"]
if text.count(old) != 1:
    sys.exit(f"mutant text found {text.count(old)} times in {path}: {old!r}")
open(path, "w").write(text.replace(old, new))
EOF
  out=$(CTR_SIM_SCHEDULES=$SCHEDULES $CARGO test --release --lib -p redis-ctr every_schedule 2>&1 || true)
  restore
  if seed=$(grep -o 'CTR_SIM_SEED=[0-9]*' <<<"$out" | head -n 1); then
    echo "caught    ${seed#CTR_SIM_SEED=}: $name"
  elif grep -q 'error\[' <<<"$out"; then
    echo "BROKEN    (does not build): $name"
    survived=1
  else
    echo "SURVIVED  $SCHEDULES schedules: $name"
    survived=1
  fi
done
exit $survived
