"""The built-in offline tasks, so the default run and the tests need no download: a sentiment task
(sentences of filler words with an odd number of sentiment words, some negated by "not"; the label says
whether positive polarity outnumbers negative, and 5 % of labels are flipped so the best reachable accuracy is
about 0.95) and a toy translation task for seq2seq.
"""

from __future__ import annotations

import random

__all__ = ["builtin_sentiment", "builtin_translation", "translate", "translation_dictionary"]


# ---- the built-in offline task ---------------------------------------------------------------------

POSITIVE = ("good great excellent superb lovely brilliant fine wonderful charming delightful "
            "moving clever fresh warm vivid gripping solid elegant funny tender").split()
NEGATIVE = ("bad awful dull poor boring weak clumsy tedious bland messy "
            "flat stale shallow lifeless silly grim sloppy tired hollow muddled").split()


def _filler_words(count: int, rng: random.Random) -> list[str]:
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vi", "dun", "pe", "ro", "ta", "ne", "shu", "bo"]
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))))
    return sorted(words)


def builtin_sentiment(examples: int, *, seed: int, label_noise: float = 0.05, negation: float = 0.0,
                      counts: tuple[int, ...] = (1, 1, 3)) -> tuple[list[str], list[int]]:
    """Generate ``examples`` sentences and their 0/1 labels, deterministically from ``seed``.

    Each sentence is 3-10 filler words with a number of sentiment words drawn from ``counts`` (an odd
    number: no ties) inserted at random places; the label is whether positive words outnumber negative
    ones, then flipped with probability ``label_noise``. ``negation`` is the chance that a sentiment word
    is preceded by "not", which flips it. The default has no negation: with it, a tiny model learns the
    flip as a sudden jump after a plateau whose length varies from seed to seed by more than a factor 2
    of optimizer steps, which made the default search's critical batch a coin toss; without it, accuracy
    rises smoothly with steps and reaches the ~0.95 ceiling the label noise leaves."""
    rng = random.Random(seed)
    filler = _filler_words(60, random.Random(0))
    texts, labels = [], []
    for _ in range(examples):
        words = [rng.choice(filler) for _ in range(rng.randint(3, 10))]
        score = 0
        for _ in range(rng.choice(counts)):
            positive = rng.random() < 0.5
            word = rng.choice(POSITIVE if positive else NEGATIVE)
            negated = negation > 0 and rng.random() < negation
            polarity = (1 if positive else -1) * (-1 if negated else 1)
            score += polarity
            at = rng.randint(0, len(words))
            words[at:at] = ["not", word] if negated else [word]
        label = int(score > 0)
        if rng.random() < label_noise:
            label = 1 - label
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


# ---- the built-in translation task (seq2seq) -------------------------------------------------------

NOUNS = "dog cat bird horse fish child king river house boat".split()
ADJECTIVES = "red big old small green happy".split()
VERBS = "sees finds likes carries hears".split()
DETERMINERS = "the a every".split()
CONNECTORS = "and near with".split()


def translation_dictionary() -> dict[str, str]:
    """The built-in translation's fixed dictionary: every source word to its own made-up target word
    (syllables drawn from seed 0, the same in every run), one to one."""
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vi", "dun", "pe", "ro", "ta", "ne", "shu", "bo", "gal", "ir"]
    source = NOUNS + ADJECTIVES + VERBS + DETERMINERS + CONNECTORS
    targets: list[str] = []
    while len(targets) < len(source):
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 3)))
        if word not in targets:
            targets.append(word)
    return dict(zip(source, targets))


def translate(words: list[str], dictionary: dict[str, str]) -> list[str]:
    """The built-in translation of a source sentence: each word through ``dictionary``, in order, except
    that an adjective goes behind the noun that follows it ("the red dog" -> "the' dog' red'")."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] in ADJECTIVES and i + 1 < len(words) and words[i + 1] in NOUNS:
            out += [dictionary[words[i + 1]], dictionary[words[i]]]
            i += 2
        else:
            out.append(dictionary[words[i]])
            i += 1
    return out


def builtin_translation(examples: int, *, seed: int, connected: float = 0.0) -> tuple[list[str], list[str]]:
    """Generate ``examples`` (source, target) sentence pairs, deterministically from ``seed``.

    A source is ``noun-phrase verb noun-phrase`` (3 to 7 words), with probability ``connected`` followed by
    ``connector noun-phrase`` (up to 11 words), a noun phrase being ``[determiner] [adjective] noun``; its
    target is ``translate`` of it: a word for word dictionary lookup plus one reordering rule. There is no
    noise: a perfect model reaches BLEU 100, and how close a batch size gets within the budget is what the
    search compares. (Without the connected sentences a 2-layer T5 learns it about twice as fast: with
    relative positions only, aligning the target's words with the source's is the hard part.)"""
    rng = random.Random(seed)
    dictionary = translation_dictionary()

    def noun_phrase() -> list[str]:
        words = [rng.choice(DETERMINERS)] if rng.random() < 0.6 else []
        words += [rng.choice(ADJECTIVES)] if rng.random() < 0.5 else []
        return words + [rng.choice(NOUNS)]

    sources, targets = [], []
    for _ in range(examples):
        words = noun_phrase() + [rng.choice(VERBS)] + noun_phrase()
        if rng.random() < connected:
            words += [rng.choice(CONNECTORS)] + noun_phrase()
        sources.append(" ".join(words))
        targets.append(" ".join(translate(words, dictionary)))
    return sources, targets
