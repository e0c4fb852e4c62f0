"""A broker restarted while its disk is still full (found by ``make soak``).

What a user expects: a crash on a full disk is followed by a start that recovers the logs and
refuses produces with KAFKA_STORAGE_ERROR until space returns, as before the crash. What
happened: recovery rebuilds the active segment's (empty) time index, and its final entry (the
segment's max timestamp) needs a page the full disk does not have; the ENOSPC took the log dir
offline ("replace or repair the disk") and, with no other dir, the broker exited 1 at start-up
("every log dir is offline"). Now recovery drops index files it cannot write (rebuilt at the
next start) and the broker starts. Needs root.
"""

from __future__ import annotations

import os
import time


from protocol import ErrorCode
from tests.faults.helpers import fill, fill_rest, values
from tests.integration.kafka_wire import WireClient, create_topic, message_set, produce


TOPIC = "full-start"


def test_a_broker_killed_on_a_full_disk_starts_while_it_is_still_full(broker_factory, small_fs):
    broker = broker_factory({"log.dirs": str(small_fs / "logs")})
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, TOPIC) == 0
        kept = message_set([b"kept"], magic=2, timestamps=[int(time.time() * 1000)])
        answer = produce(client, TOPIC, kept, acks=-1, version=9)
        assert answer.error_code == 0
    fill(small_fs, leave=0)
    fill_rest(small_fs)
    broker.kill()
    broker.start()  # raises RuntimeError: "broker exited with status 1 at start-up"
    with WireClient(broker.host, broker.port) as client:
        # Larger than anything recovery may have freed (it drops index files it cannot write).
        no_room = message_set([b"n" * 200_000], magic=2)
        refused = produce(client, TOPIC, no_room, acks=-1, version=9)
        assert refused.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        os.unlink(small_fs / "filler")
        os.unlink(small_fs / "filler-rest")
        again = produce(client, TOPIC, message_set([b"room"], magic=2), acks=-1, version=9)
        assert again.error_code == 0
        assert [v for _, v in values(client, TOPIC)] == [b"kept", b"room"]
