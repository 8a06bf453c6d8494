#!/bin/bash
# The showback HTML's energy, carbon and shared-cost charts, and shared_cost over the REST API,
# against the JSON report and an independent model (report_energy_html.py): 600 task.end
# records over 13 days (one day without tasks), 12% of them with their DRAM energy not measured
# and one account ("dark") with no energy at all, a price sheet with three [shared:NAME]
# sections (even, proportional, a credit to one account) and [carbon]. Checked, in the DOM
# Chromium builds: every day's and group's cost bar stacks the shared costs and its parts sum
# to the JSON's cost to the cent (the day's shared part equal to the sheet's amounts for that
# day); the kWh and kg CO2e charts per day and per group equal the JSON's rows to the mWh and
# gram, their parts sum to each bar exactly, the total equals the records' joules (and times
# the intensity), and a day or group with unmeasured tasks is marked (the dark account says
# "not measured", never a plain 0); per week and month, each period's days sum to its rows; no
# script or external resource. The REST API
# (GET /v1/reports/showback, the server's --prices) answers the CLI's JSON and CSV byte for
# byte, and its shared_cost per row equals the model's to the cent. Skipped (77) without
# chromium.
set -u
cd "$(dirname "$0")/../.."
. tests/integration/collector_lib.sh
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { echo "SKIP: chromium not installed (apt-get install chromium)"; exit 77; }
coll_init report_energy_html
coll_tokens --reader n1 n2 n3
MODEL=tests/integration/report_energy_html.py
python3 "$MODEL" gen "$T" || { echo "FAIL: generating the fleet"; exit 1; }
PORT=$(free_port)
start_collector "sqlite:$T/c.db" "$PORT" --prices "$T/prices.ini" || fail "collector did not come up"
for n in n1 n2 n3; do
	grep -F "\"node\": \"$n\"" "$T/ends.ndjson" >"$T/batch"
	code=$(curl -s -o "$T/resp" -w '%{http_code}' -H 'Content-Type: application/x-ndjson' \
		-H "Authorization: Bearer $(node_token $n)" --data-binary "@$T/batch" \
		"http://127.0.0.1:$PORT/v1/records")
	[ "$code" = 200 ] || fail "ingest ($n): $code $(head -c 300 "$T/resp")"
done
R=(--db "sqlite:$T/c.db" --prices "$T/prices.ini" --from 2026-11-25 --to 2026-12-08 --by account --period day)
"$COLL" report "${R[@]}" --format json >"$T/r.json" || fail "json report"
"$COLL" report "${R[@]}" --format csv >"$T/r.csv" || fail "csv report"
"$COLL" report "${R[@]}" --format html >"$T/r.html" || fail "html report"

# REST: the same report from the server's price sheet, byte for byte; shared_cost per row to
# the cent against the model
Q="from=2026-11-25&to=2026-12-08&by=account&period=day"
for fmt in json csv; do
	code=$(curl -s -o "$T/api.$fmt" -w '%{http_code}' -H "Authorization: Bearer $RD" \
		"http://127.0.0.1:$PORT/v1/reports/showback?$Q&format=$fmt")
	[ "$code" = 200 ] && cmp -s "$T/api.$fmt" "$T/r.$fmt" && ok "REST $fmt (with shared_cost) equals the CLI's byte for byte" ||
		fail "REST $fmt: $code, $(cmp "$T/api.$fmt" "$T/r.$fmt" 2>&1 | head -c 200)"
done
grep -q '"shared_cost":' "$T/api.json" || fail "REST JSON without shared_cost"
python3 "$MODEL" shared "$T/api.json" "$T/prices.ini" && ok "REST shared_cost per row and in total equal the model's to the cent" ||
	fail "REST shared_cost against the model"
stop_collector

# the limit of [shared:NAME] sections (PRICE_SHARED_MAX, 32): 32 accepted, each spread to the
# cent as the model does (even, proportional, to:ACCOUNT, credits); a 33rd refused, naming the
# file, the line of its first key and the section
python3 "$MODEL" sheet 32 "$T/shared32.ini" && python3 "$MODEL" sheet 33 "$T/shared33.ini" || fail "sheets"
R32=(--db "sqlite:$T/c.db" --from 2026-11-25 --to 2026-12-08 --by account --period day --format json)
n=$(grep -c '^\[shared:' "$T/shared32.ini")
"$COLL" report "${R32[@]}" --prices "$T/shared32.ini" >"$T/s32.json" 2>"$T/s32.err" &&
	python3 "$MODEL" shared "$T/s32.json" "$T/shared32.ini" && [ "$n" = 32 ] &&
	ok "$n [shared:] sections accepted, every row's shared_cost equal to the model's to the cent" ||
	fail "32 shared sections ($n): $(head -c 300 "$T/s32.err")"
line=$(($(grep -n '^\[shared:s33\]' "$T/shared33.ini" | cut -d: -f1) + 1))
"$COLL" report "${R32[@]}" --prices "$T/shared33.ini" >"$T/s33.json" 2>"$T/s33.err"
rc=$?
[ $rc != 0 ] && [ ! -s "$T/s33.json" ] && grep -qF "shared33.ini:$line: [shared:s33]: more than 32 shared sections" "$T/s33.err" &&
	ok "a 33rd section refused: $(head -n1 "$T/s33.err")" ||
	fail "33 shared sections: rc $rc, $(head -c 300 "$T/s33.err")"

! grep -qi '<script\|src=\|href=\|url(' "$T/r.html" && ok "no script, no external resource" ||
	fail "the HTML refers to something outside it"
dom=
for limit in 60 180; do # a browser start can take over a minute on a loaded host
	timeout "$limit" "$CHROME" --headless --no-sandbox --disable-gpu --dump-dom "file://$T/r.html" \
		>"$T/dom.html" 2>/dev/null && [ -s "$T/dom.html" ] && { dom=1; break; }
done
[ -n "$dom" ] || fail "chromium --dump-dom"
python3 "$MODEL" html "$T/dom.html" "$T/r.json" "$T" &&
	ok "cost (shared stacked), kWh and kg CO2e charts per day and per group equal the JSON and the records; unmeasured marked" ||
	fail "HTML charts against the JSON (above)"
# per week and per month: a period's days (each its share, by its joules) sum to the period's
# rows exactly, all days to the total
for p in week month; do
	R2=(--db "sqlite:$T/c.db" --prices "$T/prices.ini" --from 2026-11-25 --to 2026-12-08 --by account,user --period $p)
	"$COLL" report "${R2[@]}" --format json >"$T/$p.json" && "$COLL" report "${R2[@]}" --format html >"$T/$p.html" &&
		python3 "$MODEL" periods "$T/$p.html" "$T/$p.json" && ok "--period $p: each period's days sum to its rows (kWh, kg CO2e)" ||
		fail "--period $p: days against rows"
done
if [ -n "${CORRAL_ARTIFACTS:-}" ]; then # a screenshot to look at: $O/test-artifacts/
	mkdir -p "$O/test-artifacts"
	timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,3400 \
		--screenshot="$O/test-artifacts/report_energy_html.png" "file://$T/r.html" >/dev/null 2>&1 &&
		ok "screenshot: $O/test-artifacts/report_energy_html.png"
fi
[ $fails = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"
exit 1
