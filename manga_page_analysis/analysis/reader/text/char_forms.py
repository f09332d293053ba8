"""Characters the recogniser writes in another form than a Japanese page prints them: kanji in
their Chinese form, and the quotation marks of a column.

The recogniser (trained largely on Chinese) reads some Japanese kanji as the form mainland
Chinese writes: 黒 as 黑, 徳 as 德. `japanese_forms` writes those back. The table is
derived from OpenCC's data (tests/unit/test_char_forms.py derives it again and compares):
a character that mainland Chinese writes as it is (in GB 2312, unchanged by OpenCC's
traditional-to-simplified table) and that OpenCC's traditional-to-Japanese table (t2jp)
rewrites, when the Japanese form is an everyday kanji (JIS X 0208 level 1) and the Chinese
form is not. So an old form a Japanese page does print on purpose (當 in a brand name, 國,
澤 in a name: traditional Chinese, not mainland) never changes, nor does a kanji that
Japanese uses as it is (国, 学; 曾 of 未曾有 and 凛 of 凛々しい, both of which t2jp rewrites).
"""

from __future__ import annotations

from typing import Final

CHINESE_FORMS: Final = str.maketrans(
    "乘佛假兔冰剩卷咒圈增壤壹德惠拂拔拜插搜收效敕溪瓣皋碎稻穗穰粹缺罐舍薰藏豫辨醉陷霸髓黑默",
    "乗仏仮兎氷剰巻呪圏増壌壱徳恵払抜拝挿捜収効勅渓弁皐砕稲穂穣粋欠缶舎薫蔵予弁酔陥覇髄黒黙",
)
"""Mainland Chinese form to the Japanese one (43 kanji; how it is derived: the module's doc)."""


def japanese_forms(text: str) -> str:
    """`text` (read on a Japanese page) with the mainland Chinese forms of `CHINESE_FORMS`
    written in their Japanese form: 黑胡麻 → 黒胡麻. Everything else is left as it is."""
    return text.translate(CHINESE_FORMS)


VERTICAL_QUOTES: Final = str.maketrans({"\u201c": "\u301d", "\u201d": "\u301f"})
"""The curly double quotes “ ” to the double prime quotation marks 〝 〟 (U+301D, U+301F)."""


def vertical_quotes(text: str) -> str:
    """`text` (read down a column of a Japanese page) with its curly double quotes written as
    the marks a column sets: 〝藁人形〟. Vertical Japanese text never sets “ ”; the recogniser,
    trained mostly on horizontal text, reads the column's 〝 〟 laid on their side as them.
    (NFKC does not unify the two, so the difference counts in every comparison.)"""
    return text.translate(VERTICAL_QUOTES)
