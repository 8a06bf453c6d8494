"""The collector's model of a running task's open row under node.sample statements, from the
raw records (tests/integration/sample_unchanged*.sh): the time and the rss its open row must
have reached after its last task.sample."""


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
