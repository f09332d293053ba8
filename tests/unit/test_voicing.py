"""Voiced marks on kana: what the second read and the eval's error classes rely on."""

from __future__ import annotations

from manga_page_analysis.analysis.reader.recognition.voicing import (
    adds_voicing_only,
    differs_in_voicing_only,
    may_be_voiced,
    unvoiced,
)


def test_readings_that_differ_only_in_voiced_marks():
    assert differs_in_voicing_only("とんな練習", "どんな練習")
    assert differs_in_voicing_only("ズポンの", "ズボンの")  # handakuten for dakuten
    assert not differs_in_voicing_only("どんな", "どんな")  # the same reading
    assert not differs_in_voicing_only("朝練で", "朝練て!")  # another length
    assert not differs_in_voicing_only("父しぶり", "久しぶり")  # another character


def test_marks_come_off_and_only_kana_that_take_them_may_be_voiced():
    assert unvoiced("ごはんぱン") == "こはんはン"
    assert may_be_voiced("とんな") and may_be_voiced("ズボン")
    assert (
        not may_be_voiced("東京駅") and not may_be_voiced("ーっ…") and not may_be_voiced("ノノミ")
    )


def test_a_reading_that_only_adds_voiced_marks():
    assert adds_voicing_only("とんな練習", "どんな練習")
    assert adds_voicing_only("はんこ", "ぱんご")  # handakuten and dakuten added
    assert not adds_voicing_only("朝練で", "朝練て")  # a mark taken off
    assert not adds_voicing_only("ぶた", "ぷた")  # a mark changed
    assert not adds_voicing_only("どんな", "どんな")  # the same reading
    assert not adds_voicing_only("こんな", "ごんなに")  # another length
