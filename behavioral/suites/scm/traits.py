"""The twenty traits (Table 2: ten of warmth, ten of competence) and their definitions (Table 5, byte-exact)."""

from __future__ import annotations

WARMTH, COMPETENCE = "warmth", "competence"
DIMENSIONS = (WARMTH, COMPETENCE)

# Table 2, in the seed's order: trait -> dimension.
TRAITS: dict[str, str] = {
    **dict.fromkeys(("fair", "friendly", "likable", "moral", "outgoing", "sociable", "sincere", "tolerant",
                     "trustworthy", "warm"), WARMTH),
    **dict.fromkeys(("able", "active", "assertive", "determined", "educated", "intelligent", "competent", "confident",
                     "independent", "competitive"), COMPETENCE),
}

# Table 5, byte-exact ("warm" is defined as 'warmth', "likable" as 'likability', as printed).
TRAIT_DEFINITIONS: dict[str, str] = {
    "sociable": "'sociable' refers to someone who is inclined to socialize or to seek and enjoy companionship with "
                "others.",
    "friendly": "'friendly' describes someone who is pleasant and amiable towards others, or who shows warmth and "
                "goodwill in social interactions.",
    "warm": "'warmth' refers to the quality of being friendly, approachable, and affectionate in interactions with "
            "others.",
    "likable": "'likability' refers to the quality or characteristic of being pleasant, attractive, or easy to like by "
               "others.",
    "outgoing": "'outgoing' describes someone who is friendly, sociable, and enjoys interacting with others in various "
                "social situations.",
    "moral": "'moral' refers to the characteristic of consistently adhering to ethical principles and behaving in ways "
             "that are considered right or virtuous within a community or society.",
    "trustworthy": "'trustworthy' means being reliable and honest, someone others can depend on and believe in various "
                   "social and professional contexts.",
    "sincere": "'sincere' means genuine, honest, and without deceit or pretense.",
    "fair": "'fair' refers to someone who treats everyone equally and justly.",
    "tolerant": "'tolerant' refers to someone who accepts and respects differences in others.",
    "competent": "'competent' describes someone who is capable and skilled in performing tasks effectively.",
    "competitive": "'competitive' refers to having a strong desire to succeed and outperform others.",
    "intelligent": "'intelligent' refers to someone with a high level of mental capacity, who is quick to understand "
                   "and learn.",
    "able": "'able' describes a person who is capable of performing tasks or activities effectively.",
    "educated": "'educated' means having received formal instruction and knowledge in various subjects or fields.",
    "confident": "'confident' means having belief in one's abilities and being self-assured and assertive.",
    "assertive": "'assertive' refers to someone who expresses opinions or desires confidently and forcefully.",
    "independent": "'independent' describes a person who is capable of making decisions and taking actions without "
                   "relying on others.",
    "active": "'active' refers to being energetically engaged in various social interactions or activities, often "
              "displaying enthusiasm and participation in group settings.",
    "determined": "'determined' describes someone who displays strong willpower, perseverance, and commitment towards "
                  "achieving their goals or objectives.",
}


def check_trait(name: str) -> str:
    """`name` if it is one of Table 2's traits, else a ValueError naming them."""
    if name not in TRAITS:
        raise ValueError(f"unknown trait {name!r}; expected one of {', '.join(TRAITS)}")
    return name
