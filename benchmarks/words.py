"""Vocabulary for the benchmarks' deterministic synthetic text (seeded choices from these lists)."""

WORDS = """
the a an of to in for on with by from as at is are be when if then else not only each every any all
file files path directory repository branch commit change changes test tests function class method
module package import export value values string number integer boolean array object list map key
keys field fields parameter parameters argument arguments option options command commands shell
output input error errors warning result results return returns call calls tool tools user users
agent task tasks session context prompt message messages request response server client stream
timeout retry limit limits maximum minimum default defaults setting settings config configuration
use used using run runs running write writes read reads edit edits create creates delete deletes
update updates search searches find match matches pattern patterns line lines column offset range
before after between within without must should may never always prefer avoid ensure verify check
existing new current previous next first last whole part entire specific relevant exact absolute
relative working worktree workspace project code source build install dependency dependencies
background foreground process processes exit status codes log logs debug trace notebook cell
schedule cron job jobs wake report finding findings skill skills workflow fetch web page url content
contents summary summaries description descriptions instructions guidance important note notes
example examples format formats markdown json yaml text plain unicode bytes characters parser
tokenizer cache
""".split()

CODE_TOKENS = """
def class return import from self None True False if elif else for while try except finally with as
yield lambda async await raise assert pass break continue print len range dict list set tuple str
int float bool open path os sys json re time logging config result value items keys append extend
update get pop join split strip replace format startswith endswith isinstance
""".split()
