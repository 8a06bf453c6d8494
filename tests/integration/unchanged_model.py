"""The collector's model of a running task's open row under node.sample statements, from the
raw records (tests/integration/sample_unchanged*.sh): the time and the rss its open row must
have reached after its last task.sample, and the check of every open row against it."""


def listed_until(task, s_time, nodes):
    """(time_ns, rss_bytes): the latest node.sample after the task's last task.sample (at s_time)
    that lists it (tasks_unchanged: its time, the rss the listing gave) or covers it (a
    tasks_alive statement referring to that listing by the listing record's time, and not
    excepting it: its time, the listing's rss). nodes: (time_ns, decoded body) of every
    node.sample, oldest first. (s_time, 0) when none."""
    t, rss, listing = s_time, 0, None
    for n_time, n in nodes:
        if n_time <= s_time:
            continue
        for e in n.get('tasks_unchanged', []):
            if e[0] == task:
                t, rss, listing = n_time, e[2], n['time']
        al = n.get('tasks_alive')
        if al and listing is not None and al['since'] == listing and task not in al['except']:
            t = n_time
    return t, rss


def open_rows_check(c, tasks, nodes):
    """Each task's open row (sqlite3 connection c to the collector's database) against the
    model from its task.start, its last task.sample and the node.sample records listing or
    covering it (nodes as for listed_until): wall = t - start, requested core-s = cpus x wall,
    memory byte-seconds of the last sample + rss x the time since. Prints the first three
    mismatches, or one ok line; returns whether all matched."""
    import json
    rows = {r[0]: r[1:] for r in c.execute(
        "SELECT task_id, sample_ns, wall_s, cpu_req_core_s, mem_byte_s FROM rollup_open")}
    wrong = 0
    for task in tasks:
        start = json.loads(c.execute("SELECT body FROM records WHERE type='task.start' AND"
                                     " task_id=?", (task,)).fetchone()[0])
        s_time, s_body = c.execute("SELECT time_ns, body FROM records WHERE type='task.sample'"
                                   " AND task_id=? ORDER BY time_ns DESC LIMIT 1",
                                   (task,)).fetchone()
        u = json.loads(s_body)['usage']
        t, rss = listed_until(task, s_time, nodes)
        wall = (t - start['start_time'] * 1000) / 1e9
        want = (t, wall, start['request']['cpus'] * wall,
                u.get('memory_byte_seconds', 0) + rss * (t - s_time) / 1e9)
        got = rows.get(task)
        if got is None or got[0] != want[0] or any(
                abs(g - w) > max(1e-5 * abs(w), 1e-3) for g, w in zip(got[1:], want[1:])):
            if wrong < 3:
                print("FAIL: %s: open row %r, model %r" % (task, got, want))
            wrong += 1
    if not wrong:
        print("ok: the %d open rows equal the model from the raw records" % len(tasks))
    return not wrong
