"""The stream envelope: frames survive any chunking of the bytes that carry them."""

from hypothesis import given
from hypothesis import strategies as st

from services.platform.envelopes import END_STREAM, end_stream_error, envelope, read_frames

frames_st = st.lists(st.tuples(st.sampled_from([0, END_STREAM]), st.binary(max_size=300)), max_size=8)


@given(frames_st, st.lists(st.integers(min_value=1, max_value=64), max_size=40))
def test_any_chunking_yields_the_frames_sent(frames, cuts):
    data = b"".join(envelope(payload, flags) for flags, payload in frames)
    chunks, at = [], 0
    for cut in cuts:
        chunks.append(data[at:at + cut])
        at += cut
    chunks.append(data[at:])
    assert list(read_frames(chunks)) == frames


def test_a_partial_frame_at_the_end_is_not_yielded():
    data = envelope(b"whole") + envelope(b"cut short")[:-3]
    assert list(read_frames([data])) == [(0, b"whole")]


def test_end_of_stream_errors():
    assert end_stream_error(b"") is None
    assert end_stream_error(b"{}") is None
    # The server ending a follower's stream at the caller's own deadline is a normal end.
    assert end_stream_error(b'{"error": {"code": "deadline_exceeded"}}') is None
    assert end_stream_error(b'{"error": {"code": "unavailable", "message": "x"}}') == {
        "code": "unavailable", "message": "x"}
